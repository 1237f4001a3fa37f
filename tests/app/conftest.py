"""Fixtures of the browser tests: the app served on the bundled tiny pair, and a page
on it (headless Chromium itself, ``browser``, is tests/conftest.py's). Module-scoped:
each test module gets its own browser and app."""
from __future__ import annotations

import pytest

from browsing import open_app
from serving import serve


@pytest.fixture(scope="module")
def server():
    """(demo, url): the app on the bundled tiny pair, served."""
    from mtp_viz.app.page import layout as ui
    demo = ui.build_demo(target="tiny")
    url = serve(demo)
    yield demo, url
    demo.close()


@pytest.fixture
def page(browser, server):
    """A new page on ``server``'s app, its model loaded."""
    page = open_app(browser, server[1])
    yield page
    page.close()
