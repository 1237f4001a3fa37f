"""Fixtures of the browser tests: headless Chromium, the app served on the bundled tiny
pair, and a page on it. Module-scoped: each test module gets its own browser and app."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

from browsing import ARGS, CHROMIUM, open_app
from serving import serve


@pytest.fixture(scope="module")
def server():
    """(demo, url): the app on the bundled tiny pair, served."""
    from mtp_viz.app.page import layout as ui
    demo = ui.build_demo(target="tiny")
    url = serve(demo)
    yield demo, url
    demo.close()


@pytest.fixture(scope="module")
def browser():
    if not Path(CHROMIUM).exists():
        message = "needs Debian's chromium (apt-get install chromium fonts-dejavu-core)"
        if os.environ.get("CI"):  # CI installs it: a missing browser is a failure there
            pytest.fail(message)
        pytest.skip(message)
    from playwright import sync_api
    with sync_api.sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        yield b
        b.close()


@pytest.fixture
def page(browser, server):
    """A new page on ``server``'s app, its model loaded."""
    page = open_app(browser, server[1])
    yield page
    page.close()
