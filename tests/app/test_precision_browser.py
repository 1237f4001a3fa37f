"""In headless Chromium: a precision picked under More settings is the pair that runs, and
the page says so (the model status and both stats lines); int4, which has no kernel on
this CPU, is one visible sentence."""
from __future__ import annotations

import pytest

from browsing import PROMPT, open_settings

pytestmark = pytest.mark.browser


def pick(page, field: str, value: str) -> None:
    page.click(f"#{field} input")
    page.get_by_role("option", name=value, exact=True).click()


def test_the_precision_picked_is_what_runs_and_the_page_says_so(page):
    open_settings(page)
    pick(page, "target-precision", "int8")
    page.fill("#prompt textarea", PROMPT)
    page.click("#run")
    page.wait_for_selector("#status:has-text('Done')", timeout=180_000)
    spec = page.locator("#spec-stats .mv-precision").evaluate("e => ({...e.dataset})")
    assert spec == {"targetPrecision": "int8", "drafterPrecision": "float32"}  # the default drafter: the CPU's
    assert page.locator("#ar-stats .mv-precision").get_attribute("data-target-precision") == "int8"
    page.wait_for_selector("#model-status:has-text('(target int8, drafter float32)')", timeout=30_000)
    assert "token-identical" in page.inner_text("#compare")  # an int8 target computes in float32

    pick(page, "target-precision", "int4")
    page.click("#run")
    page.wait_for_selector("#status:has-text('int4 has no kernel on this CPU')", timeout=60_000)
