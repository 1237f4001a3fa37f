"""In headless Chromium: Compiled engine ticked under More settings loads the bundled
tiny pair compiled (a pair of its own), the model status says what compiling took, and
the run's speedup badge says the compiled engine ran (``#compare[data-engine]``).
Compiling the tiny pair takes a minute or two of CPU the first time."""
from __future__ import annotations

import pytest

from browsing import PROMPT, open_settings

pytestmark = [pytest.mark.browser, pytest.mark.slow]


def test_the_compiled_engine_ticked_is_what_runs_and_the_badge_says_so(page):
    open_settings(page)
    page.check("#compile input")
    page.wait_for_selector("#model-status:has-text('compiled loads on first run')", timeout=30_000)
    page.fill("#prompt textarea", PROMPT)
    page.click("#run")
    page.wait_for_selector("#status:has-text('Done')", timeout=300_000)
    assert page.locator("#compare").get_attribute("data-engine") == "compiled"
    assert "compiled engine" in page.inner_text("#compare .mv-engine")
    assert "token-identical" in page.inner_text("#compare")
    page.wait_for_selector("#model-status:has-text('Compiled in')", timeout=30_000)
    assert "graphs), kept out of every run" in page.inner_text("#model-status")

    page.uncheck("#compile input")  # the eager pair, loaded at start, is still there
    page.wait_for_selector("#model-status:has-text('Ready')", timeout=30_000)
    assert "Compiled in" not in page.inner_text("#model-status")
    page.click("#run")
    page.wait_for_selector("#compare[data-engine='eager']", timeout=120_000)
    assert "eager engine" in page.inner_text("#compare .mv-engine")
