"""Counting experts in the app, in headless Chromium: a mixture-of-experts pair saved as
folders (the 26B-A4B's classes) served with ``build_demo(target=folder, drafter=folder)``;
"Count experts" comes on offer once it is loaded, a run with it fills the chart
"Experts touched per verification"; a dense pair loaded next turns the switch off with
its reason, and its chart, which cannot apply, is no longer shown."""
from __future__ import annotations

import pytest

from browsing import open_app, open_settings, open_tab
from factories import save_gemma_pair, save_moe_pair
from mtp_viz.app.handlers.local import EXPERTS_ON
from mtp_viz.views.charts import DENSE
from serving import serve

pytestmark = pytest.mark.browser
PROMPT = " ".join(f"w{i}" for i in range(10, 40))


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    root = tmp_path_factory.mktemp("pairs")
    return save_moe_pair(root / "moe"), save_gemma_pair(root / "dense")


@pytest.fixture(scope="module")
def moe_server(folders):
    from mtp_viz.app.page import layout as ui
    target, drafter = folders[0]
    demo = ui.build_demo(target=str(target), drafter=str(drafter))
    url = serve(demo)
    yield demo, url
    demo.close()


def run_and_wait(page):
    page.fill("#prompt textarea", PROMPT)
    page.click("#run")
    page.wait_for_selector("#status:has-text('Done')", timeout=180_000)


def test_the_experts_chart_fills_on_a_mixture_of_experts_pair(browser, moe_server, folders):
    page = open_app(browser, moe_server[1])
    try:
        open_settings(page)
        switch = page.locator("#experts input")
        page.wait_for_selector("#experts input:not([disabled])", timeout=60_000)
        assert EXPERTS_ON.split(" (")[0] in page.inner_text("#experts")
        switch.check()
        open_tab(page, "inside")
        assert page.locator("#experts-plot").is_visible()    # a mixture of experts: the chart applies
        open_tab(page, "decode")
        run_and_wait(page)
        page.wait_for_selector("#experts-plot .js-plotly-plot g.trace", state="attached", timeout=30_000)
        points = page.locator("#experts-plot .js-plotly-plot g.trace.scatter path.point")
        assert points.count() > 5  # the verifications, and the means by draft length
        assert "one plain token: top-2" in page.inner_text("#experts-plot")
        assert page.locator("#anatomy [data-experts='8'][data-top-k-experts='2']").count() == 1

        # A dense pair: the switch goes off with its reason, and the chart says why it is empty.
        dense_target, dense_drafter = folders[1]
        page.locator("#custom-target textarea, #custom-target input").first.fill(str(dense_target))
        page.locator("#custom-drafter textarea, #custom-drafter input").first.fill(str(dense_drafter))
        page.click("#load")
        page.wait_for_selector("#experts input[disabled]", state="attached", timeout=120_000)
        assert not switch.is_checked() and DENSE in page.inner_text("#experts")
        page.wait_for_selector("#experts-plot", state="hidden", timeout=30_000)  # it cannot apply: not shown
        run_and_wait(page)
        assert page.locator("#experts-plot").count() == 1 and not page.locator("#experts-plot").is_visible()
    finally:
        page.close()
