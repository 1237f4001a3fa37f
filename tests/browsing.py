"""Helpers of the browser tests (headless Chromium through Playwright); their fixtures
(``browser``, ``server``, ``page``) are in app/conftest.py."""
from __future__ import annotations

CHROMIUM = "/usr/bin/chromium"
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync"]

PROMPT = "def fibonacci(n):\n    \"\"\"Return the n-th Fibonacci number.\"\"\"\n"


def new_page(browser, width=1280, height=720):
    """A page whose visitor has already seen the first-visit tour (which would stand
    in front of the controls the tests click)."""
    page = browser.new_page(viewport={"width": width, "height": height})
    page.add_init_script("localStorage.setItem('mtp-viz-tour-done', '1')")
    return page


def open_app(browser, url, width=1280, height=720):
    """A new page on the app at ``url``, once its model is loaded."""
    page = new_page(browser, width, height)
    page.goto(url)
    page.wait_for_selector("#model-status:has-text('Ready')", timeout=180_000)
    return page


def open_settings(page):
    page.locator("#settings").get_by_text("More settings").click()
    page.wait_for_selector("#chat input", state="attached")


def open_tab(page, tab: str):
    """Show the page's tab ``tab`` (``decode``, ``inside``, ``measure``, ``servers``, ``learn``)."""
    page.click(f"#tabs [data-tab='{tab}']")
    page.wait_for_selector(f"#tab-{tab}", state="visible")


def in_view(page, selector: str) -> bool:
    box = page.locator(selector).bounding_box()
    vw = page.viewport_size
    return box is not None and box["y"] >= 0 and box["y"] + min(box["height"], 120) <= vw["height"] \
        and box["x"] >= 0 and box["x"] + box["width"] <= vw["width"]


def upload_trace(page, path):
    """Replay the trace file at ``path`` through the page's upload, to its end."""
    page.set_input_files("#trace-upload input[type='file']", str(path))
    page.wait_for_selector("#status:has-text('Replay done')", timeout=120_000)
