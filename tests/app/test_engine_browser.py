"""In headless Chromium: the page's one engine control. Under More settings the engine is
``#engine`` alone (no ``#compile`` checkbox beside it), and Measure's ``#measure-beside``
offers every engine of the table but the run's own: it follows ``#engine`` as the visitor
picks, a pick that became the run's engine goes back to none, and a link's ``compile=1``
(the alias, read once by the links) picks the compiled engine on both. The app has no model
to load: the controls are what is checked (Measure beside an engine, for real:
tests/app/test_compile_app.py and test_measure_beside.py)."""
from __future__ import annotations

import pytest

from browsing import new_page, open_settings
from serving import serve_modelless

pytestmark = pytest.mark.browser


@pytest.fixture(scope="module")
def modelless():
    demo, url = serve_modelless()
    yield url
    demo.close()


def _offered(page) -> list[str]:
    return [t.strip() for t in page.locator("#measure-beside label:has(input)").all_inner_texts()]


def _checked(page, control: str) -> str:
    return page.locator(f"#{control} label:has(input:checked)").inner_text().strip()


def test_one_engine_control_and_measure_beside_follows_it(browser, modelless):
    page = new_page(browser)
    try:
        page.goto(modelless)
        page.wait_for_selector("#model-status:has-text('no model')", timeout=60_000)
        open_settings(page)
        assert page.locator("#compile").count() == 0   # the checkbox that mirrored #engine is gone
        assert _checked(page, "engine") == "eager engine"
        assert _offered(page) == ["none", "compiled engine"] and _checked(page, "measure-beside") == "none"
        page.locator("#measure-beside").get_by_label("compiled engine").check()
        page.locator("#engine").get_by_label("compiled engine").check()   # the pick is the run's engine now
        page.wait_for_function("() => document.querySelector('#measure-beside').innerText.includes('eager engine')",
                               timeout=10_000)
        assert _offered(page) == ["none", "eager engine"] and _checked(page, "measure-beside") == "none"
        page.locator("#measure-beside").get_by_label("eager engine").check()
        page.locator("#engine").get_by_label("eager engine").check()
        page.wait_for_function("() => document.querySelector('#measure-beside').innerText.includes('compiled engine')",
                               timeout=10_000)
        assert _offered(page) == ["none", "compiled engine"] and _checked(page, "measure-beside") == "none"

        page.goto(modelless + "?compile=1")   # the alias in a link: the engine it names, on both controls
        page.wait_for_selector("#model-status:has-text('no model')", timeout=60_000)
        open_settings(page)
        page.wait_for_function("() => document.querySelector('#measure-beside').innerText.includes('eager engine')",
                               timeout=10_000)
        assert _checked(page, "engine") == "compiled engine" and _offered(page) == ["none", "eager engine"]
    finally:
        page.close()
