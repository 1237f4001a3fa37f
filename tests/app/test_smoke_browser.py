"""The quick tier's one browser test: the app served on the bundled pair, opened in headless
Chromium, runs a short greedy comparison and fills both panes and the speedup badge. (The
browser tier, ``-m browser``, holds the rest.)"""
from __future__ import annotations


def test_a_short_run_fills_both_panes_and_the_badge(page):
    page.fill("#prompt textarea", "def add(a, b):\n    return")
    page.fill("#max-new input[type='number']", "12")
    page.press("#max-new input[type='number']", "Enter")
    page.click("#run")
    page.wait_for_selector("#status:has-text('Done')", timeout=120_000)
    assert page.locator("#spec-output .tok").count() > 0 and page.locator("#ar-output .tok").count() > 0
    assert page.locator("#compare").get_attribute("data-engine") == "eager"
    assert "token-identical" in page.inner_text("#compare")
