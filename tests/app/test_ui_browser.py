"""End-to-end tests of the Gradio app in headless Chromium, on the bundled tiny pair.

Needs Debian's chromium (``apt-get install chromium``); CI installs it, so there a
missing browser fails the test instead of skipping it. Set ``MTP_VIZ_SCREENSHOT=1`` to
write the README's screenshot (docs/screenshot.png) from the first test.
"""
from __future__ import annotations

import json
import os
import re
import threading
import time
from collections import Counter
from pathlib import Path

import pytest

from browsing import PROMPT, in_view, new_page, open_app, open_settings, open_tab, upload_trace
from locations import ROOT
from serving import serve, serve_modelless

pytestmark = pytest.mark.browser


class Gated:
    """The app's model work (:func:`mtp_viz.sources.local.runs`) on the bundled pair,
    except that the speculative run waits after its first two steps until the run's own
    stop switch is set (at most two minutes): Stop and a closed tab are then tested
    without any race against the run finishing first."""

    def __init__(self):
        self.waiting, self.finished = threading.Event(), threading.Event()
        self.stopped_by_switch = False

    def __call__(self, pair, s, stop=None, pause=None, schedules=None):
        from mtp_viz.sources.local import runs
        steps, parked = 0, False
        try:
            for mode, e in runs(pair, s, stop, pause, schedules):
                yield mode, e
                steps += mode == "speculative" and e.type == "step"
                if steps == 2 and not parked:
                    parked = True
                    self.waiting.set()
                    self.stopped_by_switch = stop.wait(120)
        finally:
            self.finished.set()


@pytest.fixture(scope="module")
def gated_server():
    from mtp_viz.app.page import layout as ui
    gate = {"pair": Gated()}
    demo = ui.build_demo(target="tiny")
    demo.mtp_app.handlers.runs = gate["pair"]  # what a Run calls (Handlers.source)
    url = serve(demo)
    yield demo, url, gate
    demo.close()


def _screenshot_path(tmp_path: Path) -> Path:
    want = os.environ.get("MTP_VIZ_SCREENSHOT", "")
    if not want:
        return tmp_path / "screenshot.png"
    return ROOT / "docs" / "screenshot.png" if want.lower() in ("1", "true", "yes") else Path(want)


def _expected(demo) -> tuple[Counter, int]:
    """Token kinds of the same greedy generation, straight from the engine."""
    from mtp_viz.app.runtime.pairs import PairSpec
    pair = demo.mtp_app.loader.state(PairSpec("tiny")).pair
    events = list(pair.generate(PROMPT, mode="speculative", drafter="mtp", max_new_tokens=64,
                                draft_tokens=4, schedule="constant", chat=False))
    kinds = Counter(e.type if e.type != "bonus" else f"bonus-{e.kind}" for e in events)
    ar = sum(e.type == "token" for e in pair.generate(PROMPT, mode="autoregressive",
                                                     max_new_tokens=64, chat=False))
    return kinds, ar


def test_run_fills_both_panes_charts_and_compare_hooks(page, server, tmp_path):
    demo, _ = server
    open_settings(page)
    assert not page.locator("#chat input").is_checked()  # the bundled base model has no template
    page.fill("#prompt textarea", PROMPT)
    page.click("#run")
    page.wait_for_selector("#status:has-text('Done')", timeout=180_000)

    expected, ar_tokens = _expected(demo)
    shown = Counter(k if k != "bonus" else f"bonus-{b}" for k, b in page.locator("#spec-output span.tok")
                    .evaluate_all("els => els.map(e => [e.dataset.kind, e.dataset.bonus || ''])"))
    for kind in ("accepted", "rejected", "bonus-correction", "bonus-extension"):
        assert shown[kind] == expected[kind], (kind, shown, expected)
    assert shown["accepted"] > 0 and shown["drafted"] == 0   # nothing left pending
    assert page.locator("#ar-output span.tok[data-kind='token']").count() == ar_tokens > 0
    assert page.locator("#ar-output span.tok:not([data-kind='token'])").count() == 0
    assert page.locator("#spec-output img, #ar-output img").count() == 0
    # greedy speculative decoding is lossless: the page must say the outputs are identical
    assert "token-identical" in page.inner_text("#compare")

    hooks = page.locator("#compare").evaluate("e => ({...e.dataset})")
    spec_tps, ar_tps = float(hooks["specTps"]), float(hooks["arTps"])
    assert spec_tps > 0 and ar_tps > 0 and hooks["basis"] == "single run" and int(hooks["threads"]) >= 1
    assert float(hooks["speedup"]) == pytest.approx(spec_tps / ar_tps, rel=1e-3)
    # one torch thread on a CPU: timed on the engine thread's CPU clock, and labelled so
    assert hooks["clock"] == ("cpu" if hooks["threads"] == "1" else "wall")
    assert ("of engine CPU time" in page.inner_text("#compare")) == (hooks["clock"] == "cpu")
    # the stats lines show the same tokens/s to one decimal (the hooks carry three)
    for pane, tps in (("spec", spec_tps), ("ar", ar_tps)):
        shown = float(re.search(r"([\d.]+)\s*tokens/s", page.inner_text(f"#{pane}-stats")).group(1))
        assert abs(shown - tps) <= 0.05 + 1e-9, (pane, shown, tps)
    # a projector's first screen: both panes and the speedup without scrolling
    page.evaluate("window.scrollTo(0, 0)")
    for sel in ("#compare", "#spec-output", "#ar-output"):
        assert in_view(page, sel), sel

    for plot in ("acceptance-plot", "draft-length-plot"):
        page.wait_for_selector(f"#{plot} .js-plotly-plot g.trace", state="attached", timeout=30_000)

    out = _screenshot_path(tmp_path)
    out.parent.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(out))
    assert out.stat().st_size > 10_000


def test_measure_reports_a_median_with_its_basis(page):
    open_settings(page)
    repeats = page.locator("#repeats input[type='number']")
    repeats.fill("3")
    repeats.blur()
    page.click("#measure")
    page.wait_for_selector("#compare[data-basis^='median of']", timeout=300_000)
    n = int(repeats.input_value())
    assert page.locator("#compare").get_attribute("data-basis") == f"median of {n}"
    text = page.inner_text("#compare")
    assert f"{n} repeats" in text and ("range" in text or "too close to call" in text)
    # at 1280x720 nothing of the result overflows its box (Measure's badge was 1358 px in 1192)
    over = page.evaluate("""() => {
        const box = document.querySelector('#compare-panel').getBoundingClientRect();
        return [...document.querySelectorAll('#compare, #compare *')]
            .filter(e => e.getBoundingClientRect().width > 0 && e.getBoundingClientRect().right > box.right + 1)
            .map(e => e.tagName + '.' + e.className + ' ' + Math.round(e.getBoundingClientRect().right));
    }""")
    assert page.viewport_size["width"] == 1280 and not over, over
    # the Measure tab has its own Measure button, the same event: its result lands there
    page.click("#tab-measure-button")
    page.evaluate("() => { const c = document.querySelector('#compare'); c.removeAttribute('data-basis'); }")
    page.click("#measure-here")
    page.wait_for_selector("#compare[data-basis^='median of']", state="attached", timeout=300_000)
    assert f"median of {n} repeats" in page.inner_text("#measure-result")


def test_race_replay_plays_both_runs(page):
    page.click("#run")
    page.wait_for_selector("#status:has-text('Done')", timeout=180_000)
    page.click("#replay")
    page.wait_for_selector("#status:has-text('Replay done')", timeout=180_000)
    assert page.locator("#spec-output span.tok").count() > 0
    assert page.locator("#ar-output span.tok").count() > 0


def test_user_errors_are_one_visible_sentence(page):
    page.fill("#prompt textarea", "   ")
    page.click("#run")
    page.wait_for_selector("#status .mv-msg-error:has-text('Type a prompt first')")
    page.fill("#prompt textarea", "import os")
    page.click("#run")                                     # the app keeps serving
    page.wait_for_selector("#status:has-text('Done')", timeout=180_000)


def test_stop_ends_the_run(browser, gated_server):
    _, url, gate = gated_server
    page = open_app(browser, url)
    try:
        page.click("#run")
        page.wait_for_selector("#spec-output span.tok", timeout=180_000)
        assert gate["pair"].waiting.wait(60)     # the run is parked until its stop switch
        page.locator("#stop").dispatch_event("click")
        page.wait_for_selector("#status:has-text('Stopped')", timeout=60_000)
        assert gate["pair"].stopped_by_switch
    finally:
        page.close()


def test_closing_the_tab_stops_the_run(browser, gated_server):
    _, url, gate = gated_server
    pair = gate.get("pair")
    page = open_app(browser, url)
    pair = gate["pair"]
    pair.waiting.clear()
    pair.finished.clear()
    page.click("#run")
    assert pair.waiting.wait(120)                # streaming, parked after two steps
    page.close()                                 # the client goes away mid-run
    assert pair.finished.wait(60) and pair.stopped_by_switch
    deadline = time.monotonic() + 30
    while any(t.name == "mtp-viz-run" and t.is_alive() for t in threading.enumerate()):
        assert time.monotonic() < deadline, "a worker kept computing after its client left"
        time.sleep(0.1)


# ---------------------------------------------------------------- traces

SPANS_JS = "els => els.map(e => [e.dataset.kind, e.dataset.bonus || '', e.textContent, e.title])"


@pytest.fixture(scope="module")
def modelless_server():
    """The app with no model to load: whatever it shows came from a trace."""
    demo, url = serve_modelless()
    yield url
    demo.close()


def test_an_uploaded_cli_trace_shows_exactly_its_token_kinds(browser, modelless_server, tmp_path):
    import contextlib

    from mtp_viz.cli.main import main
    from mtp_viz.sources import trace
    path = tmp_path / "cli.jsonl"
    with path.open("w", encoding="utf-8") as f, contextlib.redirect_stdout(f):
        for extra in ([], ["--autoregressive"]):
            assert main(["generate", "--target", "tiny", "--prompt", PROMPT, "--max-new-tokens", "48",
                         "--no-chat-template", "--jsonl", *extra]) == 0
    spec, ar = trace.spec_and_ar(trace.read(path))
    expected = Counter(e.type if e.type != "bonus" else f"bonus-{e.kind}" for e in spec)

    page = new_page(browser)
    try:
        page.goto(modelless_server)
        page.wait_for_selector("#model-status:has-text('no model')", timeout=60_000)
        upload_trace(page, path)
        shown = Counter(k if k != "bonus" else f"bonus-{b}" for k, b, _, _ in
                        page.locator("#spec-output span.tok").evaluate_all(SPANS_JS))
        for kind in ("accepted", "rejected", "bonus-correction", "bonus-extension"):
            assert shown[kind] == expected[kind], (kind, shown, expected)
        assert shown["drafted"] == 0 and sum(shown.values()) > 0
        assert page.locator("#ar-output span.tok[data-kind='token']").count() == sum(e.type == "token" for e in ar)
        assert "token-identical" in page.inner_text("#compare")
        page.wait_for_selector("#acceptance-plot .js-plotly-plot g.trace", state="attached", timeout=30_000)
    finally:
        page.close()


def test_a_downloaded_trace_uploaded_again_reproduces_the_run(page, tmp_path):
    page.fill("#prompt textarea", PROMPT)
    page.click("#run")
    page.wait_for_selector("#status:has-text('Done')", timeout=180_000)
    spans = {pane: page.locator(f"#{pane}-output span.tok").evaluate_all(SPANS_JS) for pane in ("spec", "ar")}
    assert spans["spec"] and spans["ar"]
    page.wait_for_selector("#trace-download:not([disabled])", timeout=30_000)
    with page.expect_download() as download:
        page.click("#trace-download")
    path = tmp_path / "downloaded.jsonl"
    download.value.save_as(path)

    page.reload()
    page.wait_for_selector("#model-status:has-text('Ready')", timeout=180_000)
    upload_trace(page, path)
    for pane in ("spec", "ar"):
        assert page.locator(f"#{pane}-output span.tok").evaluate_all(SPANS_JS) == spans[pane], pane


def test_scrubbing_to_a_step_shows_exactly_the_tokens_up_to_it(browser, modelless_server):
    from mtp_viz.sources import trace
    path = sorted(trace.examples_dir().glob("*.jsonl"))[0]
    spec, _ = trace.spec_and_ar(trace.read(path))
    page = new_page(browser)
    try:
        page.goto(modelless_server)
        page.wait_for_selector("#model-status:has-text('no model')", timeout=60_000)
        upload_trace(page, path)
        box = page.locator("#scrub input[type='number']")
        page.wait_for_function("() => !document.querySelector('#scrub input[type=number]').disabled",
                               timeout=30_000)
        for s in (5, 2):
            box.fill(str(s))
            box.press("Enter")
            # the scrubber sits on Decode with what it changes: a teacher scrubbing sees the tokens move
            page.wait_for_selector(f"#status:has-text('After step {s} ')", timeout=30_000)
            assert page.locator("#spec-output").is_visible() and page.locator("#scrub").is_visible()
            # (kind, bonus kind, step) of every token: the title of a span starts with its step
            want = [(e.type, e.kind if e.type == "bonus" else "", e.step) for e in spec
                    if e.type in ("accepted", "rejected", "bonus") and e.step <= s]
            got = [(k, b, int(title.split(" ")[1])) for k, b, _, title in
                   page.locator("#spec-output span.tok").evaluate_all(SPANS_JS)]
            assert sorted(got) == sorted(want), s
    finally:
        page.close()


# ---------------------------------------------------------------- step mode and exports


def test_step_mode_pauses_until_next_and_stop_still_works(page):
    page.fill("#prompt textarea", PROMPT)
    page.locator("#step-mode input").check()
    page.click("#run")
    caption = page.locator("#step-caption")
    page.wait_for_selector("#step-caption:has-text('read the prompt')", timeout=180_000)
    for phase in ("drafted", "verified"):
        time.sleep(1)                                            # frames sent before the pause land
        panes, text = page.inner_html("#spec-output") + page.inner_html("#ar-output"), caption.inner_text()
        time.sleep(3)                                            # paused: nothing changes for seconds,
        assert page.inner_html("#spec-output") + page.inner_html("#ar-output") == panes  # in either pane
        assert caption.inner_text() == text
        page.click("#next")
        words = "the drafter proposed" if phase == "drafted" else "checked them in one forward pass"
        page.wait_for_selector(f"#step-caption:has-text('{words}')", timeout=60_000)
        if phase == "drafted":                                   # the drafts wait, pending, for the target
            assert page.locator("#spec-output span.tok[data-kind='drafted']").count() > 0
        else:
            assert page.locator("#spec-output span.tok[data-kind='drafted']").count() == 0
            assert "Step 2: the drafter proposed" in caption.inner_text()
    page.locator("#stop").dispatch_event("click")
    page.wait_for_selector("#status:has-text('Stopped')", timeout=60_000)
    # the baseline took its turns between the steps, and Stop ended it too
    page.wait_for_selector("#ar-stats:has-text('stopped')", timeout=60_000)


def test_a_run_exports_an_offline_page_csv_and_png(browser, page, tmp_path):
    import csv
    page.fill("#prompt textarea", PROMPT)
    page.click("#run")
    page.wait_for_selector("#status:has-text('Done')", timeout=180_000)
    spans = page.locator("#spec-output span.tok").evaluate_all(SPANS_JS)
    files = {}
    for hook, name in (("export-html", "run.html"), ("export-csv", "steps.csv"), ("trace-download", "t.jsonl")):
        page.wait_for_selector(f"#{hook}:not([disabled])", timeout=30_000)
        with page.expect_download() as download:
            page.click(f"#{hook}")
        files[hook] = tmp_path / name
        download.value.save_as(files[hook])

    from mtp_viz.sources import trace
    spec, ar = trace.spec_and_ar(trace.read(files["trace-download"]))
    rows = list(csv.DictReader(files["export-csv"].open(encoding="utf-8")))
    steps = [e for e in spec + ar if e.type == "step"]
    assert [(r["mode"], int(r["step"]), int(r["accepted"])) for r in rows] == \
        [("speculative" if e in spec else "autoregressive", e.step, e.accepted) for e in steps]

    # the page opens with the network off and shows the same tokens and every chart
    context = browser.new_context(offline=True)
    offline = context.new_page()
    try:
        offline.goto(files["export-html"].as_uri())
        assert offline.locator("span.tok").first.is_visible()
        assert offline.locator("section").first.locator("span.tok").evaluate_all(SPANS_JS) == spans
        offline.wait_for_function("() => document.querySelectorAll('.js-plotly-plot .main-svg').length >= 5",
                                  timeout=30_000)
    finally:
        context.close()

    # charts as PNG: the chart's own toolbar
    open_tab(page, "decode")
    page.hover("#acceptance-plot .js-plotly-plot")
    with page.expect_download() as download:
        page.locator("#acceptance-plot .modebar-btn[data-title='Download plot as a PNG']").click()
    png = tmp_path / "chart.png"
    download.value.save_as(png)
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 5_000


def test_first_screen_labels_examples_draws_its_info_icons_and_shows_the_dashboard_as_a_section(
        browser, modelless_server, tmp_path):
    """What a new user met: an unlabelled dropdown beside Race replay, ⓘ as a missing-glyph
    box (no font on Debian has U+24D8), and the dashboard as a lone tab at the bottom."""
    page = new_page(browser)
    try:
        page.goto(modelless_server)
        label = page.locator("#examples [data-testid='block-info']")
        label.wait_for(state="visible", timeout=60_000)
        assert label.inner_text().strip() == "Example prompts"
        lb, eb = label.bounding_box(), page.locator("#examples").bounding_box()
        assert lb["width"] > 40 and eb["y"] <= lb["y"] and lb["y"] + lb["height"] <= eb["y"] + eb["height"]
        assert page.locator("#buttons").bounding_box()["height"] <= 44  # the row keeps its height
        assert in_view(page, "#examples") and in_view(page, "#spec-output") and in_view(page, "#ar-output")

        summaries = page.locator("details[data-explain] > summary")
        assert summaries.count() > 5
        assert all("ⓘ" not in t for t in summaries.all_inner_texts())
        icons = page.locator("details[data-explain] > summary > svg.mv-info")
        assert icons.count() == summaries.count()
        box = icons.first.bounding_box()
        assert box and box["width"] >= 10 and box["height"] >= 10

        assert page.locator("[role='tab']:has-text('vLLM dashboard')").count() == 0
        open_tab(page, "servers")                            # the dashboard: a section of the Servers tab
        assert page.locator("#dashboard-title").inner_text().startswith("vLLM dashboard")
        assert page.locator("#dashboard-url").get_by_role("textbox").is_visible()
        open_tab(page, "decode")
        page.evaluate("window.scrollTo(0, 0)")
        page.screenshot(path=str(tmp_path / "first-screen.png"))
    finally:
        page.close()


def test_a_silent_vllm_server_does_not_hold_the_local_engine(page, server):
    """Hardening II, defect 1: a vLLM run on a server that sends keep-alive comments and
    never a token waits in a queue of its own, so another visitor's local /generate run
    finishes while it is still waiting (before, it queued behind it for the model slot)."""
    from gradio_client import Client

    from hostile import MODELS, SPEC_METRICS, serve as serve_routes, trickle
    silent, url = serve_routes({"/v1/models": json.dumps(MODELS), "/metrics": SPEC_METRICS,
                                "/v1/completions": trickle(every=0.25, most=120)})  # 30 s at most
    try:
        page.click("#model input")
        page.get_by_role("option", name="vLLM or llama.cpp server (enter its URL)").click()
        page.locator("#vllm-url").get_by_role("textbox").fill(url)
        page.click("#run")
        page.wait_for_selector("#status:has-text('Speculative decoding: drafting')", timeout=60_000)
        events = Client(server[1], verbose=False).predict(prompt="def f(x):", max_new_tokens=4, chat=False,
                                                         api_name="/generate")
        assert events[-1]["type"] == "done" and events[-1]["new_tokens"] == 4
        # the vLLM run is still waiting for its first token: it never held the engine
        assert "Speculative decoding: drafting" in page.inner_text("#status")
        assert "Waiting for the server" in page.inner_text("#spec-output")
        page.click("#stop")
    finally:
        silent.shutdown()
        silent.server_close()


def test_a_failed_load_puts_the_picker_back_and_run_runs_the_loaded_pair(page):
    """Offline, E2B and Load: one sentence within seconds (not tens of seconds of Hub
    retries), the picker back on the bundled pair, and Run runs that pair, not E2B again."""
    page.wait_for_selector("#model-status:has-text('Ready')", timeout=180_000)
    page.click("#model input")
    page.locator("#model").get_by_role("option", name="Gemma 4 E2B + MTP assistant", exact=True).click()
    started = time.monotonic()
    page.click("#load")
    page.wait_for_selector("#model-status:has-text('back on Bundled tiny pair')", timeout=30_000)
    assert time.monotonic() - started < 15
    assert "cannot be reached" in page.inner_text("#model-status")
    assert page.input_value("#model input") == "Bundled tiny pair (offline, CPU)"
    page.fill("#prompt textarea", PROMPT)
    page.click("#run")
    page.wait_for_selector("#status:has-text('Done')", timeout=180_000)
    assert page.locator("#spec-output span.tok").count() > 0
