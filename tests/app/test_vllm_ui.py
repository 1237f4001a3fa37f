"""The app's vLLM source and dashboard in headless Chromium, against real vLLM servers
(MTP_VIZ_VLLM_URL with Gemma 4 MTP, MTP_VIZ_VLLM_BASELINE_URL without; see
sources/test_vllm.py). The app loads no model of its own: everything shown came from the servers.
The speculating server's /metrics is compared before and after the app's request, so
nothing else should talk to it meanwhile.
"""
from __future__ import annotations

import json
import re
import urllib.request

import pytest

from browsing import new_page, open_tab
from mtp_viz.sources.prometheus import delta
from mtp_viz.sources.vllm import client as vllm_client
from mtp_viz.sources.vllm.stream import events
from real_vllm import PROMPTS, server_url
from serving import serve_modelless

pytestmark = [pytest.mark.vllm, pytest.mark.browser]

MAX_NEW = 48


@pytest.fixture(scope="module")
def servers():
    return server_url("MTP_VIZ_VLLM_URL"), server_url("MTP_VIZ_VLLM_BASELINE_URL")


@pytest.fixture(scope="module")
def app():
    demo, url = serve_modelless()
    yield url
    demo.close()


@pytest.fixture
def page(app, browser):  # the app without a model (browser: app/conftest.py)
    page = new_page(browser)
    page.goto(app)
    page.wait_for_selector("#model-status:has-text('no model')", timeout=60_000)
    yield page
    page.close()


def _complete(url: str, prompt: str) -> dict:
    """The server's own non-streamed answer to the request the app sends (greedy)."""
    model = vllm_client.served_models(url)[0]["id"]
    body = {"model": model, "prompt": prompt, "max_tokens": MAX_NEW, "temperature": 0, "return_token_ids": True}
    req = urllib.request.Request(vllm_client.base_url(url) + "/v1/completions", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.build_opener(urllib.request.ProxyHandler({})).open(req, timeout=300) as r:
        return json.loads(r.read())


def test_the_vllm_source_shows_the_servers_tokens_and_rejection_counts(page, servers):
    url, baseline = servers
    prompt = PROMPTS[0]
    page.click("#model input")
    page.get_by_role("option", name="vLLM or llama.cpp server (enter its URL)").click()
    page.wait_for_selector("#vllm-url textarea, #vllm-url input", state="visible")
    page.locator("#vllm-url").get_by_role("textbox").fill(url)
    page.locator("#vllm-baseline-url").get_by_role("textbox").fill(baseline)
    page.fill("#prompt textarea", prompt)
    slider = page.locator("#max-new input[type='number']")
    slider.fill(str(MAX_NEW))
    slider.blur()

    page.click("#load")   # Load checks both servers
    page.wait_for_selector("#model-status:has-text('Ready')", timeout=60_000)
    status = page.inner_text("#model-status")
    assert "speculates (4 drafts per step)" in status
    assert "the baseline at" in status and "does not speculate" in status

    before = vllm_client.scrape(url)
    page.click("#run")
    page.wait_for_selector("#status:has-text('Done: vLLM kept')", timeout=300_000)
    after = vllm_client.scrape(url)

    # the tokens: exactly the server's greedy output for the same request
    full = _complete(url, prompt)["choices"][0]
    spans = page.locator("#spec-output span.tok")
    assert spans.count() == len(full["token_ids"]) == MAX_NEW
    assert "".join(spans.evaluate_all("els => els.map(e => e.textContent)")).replace("↵", "") == full["text"]
    kinds = set(spans.evaluate_all("els => els.map(e => e.dataset.kind)"))
    assert kinds <= {"accepted", "bonus"} and "accepted" in kinds

    # the rejected-draft counts: per step, the server's own per-request arrays for the same
    # greedy request; in total, what the server's /metrics counted for the app's request
    shown = {int(s): int(n) for s, n in page.locator("#spec-output .mv-rejcount").evaluate_all(
        "els => els.map(e => [e.dataset.step, e.dataset.rejected])")}
    spec = [e for e in events(url, prompt, max_new_tokens=MAX_NEW)][-1].server_metrics["speculative_decoding"]
    want = {i + 2: d - a for i, (a, d) in enumerate(zip(spec["per_step_accepted"], spec["per_step_drafted"]))
            if d > a}
    assert shown == want and shown
    d = delta(after, before)
    assert sum(shown.values()) == d.draft_tokens - d.accepted_tokens
    kept = int(re.search(r"kept (\d+) of (\d+) drafts", page.inner_text("#status")).group(1))
    assert kept == d.accepted_tokens

    # the baseline server's pane, the comparison and the honest theory panel
    assert page.locator("#ar-output span.tok[data-kind='token']").count() == MAX_NEW
    assert "token-identical" in page.inner_text("#compare")
    assert "not reported" in page.inner_text("#theory-panel")
    page.wait_for_selector("#what-if:has-text('Not for this run')", state="attached", timeout=30_000)
    page.wait_for_selector("#acceptance-plot .js-plotly-plot g.trace", state="attached", timeout=30_000)
    assert "no draft or verify times" in page.inner_text("#timing-plot")


def test_the_dashboard_charts_the_servers_traffic(page, servers):
    url, baseline = servers
    open_tab(page, "servers")
    page.locator("#dashboard-url").get_by_role("textbox").fill(url)
    page.click("#dashboard-watch")
    page.wait_for_selector("#dashboard-summary:has-text('verify steps')", timeout=60_000)
    page.wait_for_selector("#dashboard-position-plot .js-plotly-plot g.trace", state="attached", timeout=30_000)
    done = list(events(url, PROMPTS[1], max_new_tokens=32))[-1]   # traffic while watching
    assert done.type == "done"
    now = vllm_client.scrape(url)
    page.wait_for_selector(f"#dashboard-summary:has-text('{now.drafts:.0f} verify steps')", timeout=60_000)
    page.wait_for_selector("#dashboard-rate-plot .js-plotly-plot g.trace", state="attached", timeout=30_000)
    assert f"{now.accepted_tokens:.0f} accepted" in page.inner_text("#dashboard-summary")
    page.click("#dashboard-stop")
    # a server without speculation says so, in the summary and in the chart
    page.locator("#dashboard-url").get_by_role("textbox").fill(baseline)
    page.click("#dashboard-watch")
    page.wait_for_selector("#dashboard-summary:has-text('This server does not speculate')", timeout=60_000)
    page.wait_for_selector("#dashboard-position-plot:has-text('This server does not speculate')", timeout=30_000)


def test_the_traffic_panel_sweeps_both_servers_and_stop_ends_a_sweep(page, servers):
    """Two levels, four requests each on both servers: progress, the three charts with
    data, a table of four rows and identical greedy outputs; then a longer sweep that
    Stop ends after its first level."""
    url, baseline = servers
    open_tab(page, "servers")
    page.locator("#traffic-url").get_by_role("textbox").fill(url)
    page.locator("#traffic-baseline-url").get_by_role("textbox").fill(baseline)
    page.locator("#traffic-levels").get_by_role("textbox").fill("1,2")
    page.locator("#traffic-requests input").fill("4")
    page.locator("#traffic-tokens input").fill("16")
    page.click("#traffic-run")
    page.wait_for_selector("#traffic-status:has-text('Running: ')", timeout=60_000)
    page.wait_for_selector("#traffic-status:has-text('Done: ')", timeout=300_000)
    assert "identical on both servers" in page.inner_text("#traffic-status")
    assert page.locator("#traffic-table tr").count() == 1 + 4
    for plot in ("speedup", "throughput", "acceptance"):
        page.wait_for_selector(f"#traffic-{plot}-plot .js-plotly-plot g.trace", state="attached", timeout=30_000)
    assert page.locator("#traffic-throughput-plot g.trace").count() == 2  # both servers
    page.locator("#traffic-levels").get_by_role("textbox").fill("1,2,4,8")
    page.click("#traffic-run")
    page.wait_for_selector("#traffic-status:has-text('on the baseline server')", timeout=120_000)
    page.click("#traffic-stop")
    page.wait_for_selector("#traffic-status:has-text('Stopped: ')", timeout=120_000)
    assert page.locator("#traffic-table tr").count() < 1 + 8
