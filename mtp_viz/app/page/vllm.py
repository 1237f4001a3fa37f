"""The vLLM source's controls and the server dashboard's section (layout only; their
handlers are :mod:`mtp_viz.app.handlers.servers`)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import gradio as gr

from mtp_viz.app.handlers.servers import DASHBOARD_SECONDS, VLLM, ServerHandlers
from mtp_viz.app.handlers.traffic import MAX_TOKENS, Sweep, TrafficHandlers
from mtp_viz.app.runtime.guard import ServerPolicy
from mtp_viz.measure.traffic import example_levels
from mtp_viz.sources.prometheus import SpecDecodeCounters
from mtp_viz.views import dashboard, tokens


def choices(policy: ServerPolicy) -> list[tuple[str, str]]:
    """The picker's entry for this source, unless the deployment does not offer it."""
    return [("vLLM or llama.cpp server (enter its URL)", VLLM)] if policy.offered else []


def _url_info(policy: ServerPolicy) -> str | None:
    return f"This deployment connects only to: {', '.join(policy.listed)}." if policy.locked else None


@dataclass
class SourceControls:
    """The source's components: the row (shown with the picker on this source) and its fields."""
    row: Any
    url: Any
    baseline: Any


def source_row(policy: ServerPolicy, visible: bool = False) -> SourceControls:
    """The URL fields, shown while the picker is on "vLLM server"."""
    first = policy.listed[0] if policy.locked and policy.listed else ""
    with gr.Row(visible=visible) as row:
        url = gr.Textbox(first, label="vLLM server (MTP)", placeholder="http://127.0.0.1:8000",
                         elem_id="vllm-url", info=_url_info(policy))
        baseline = gr.Textbox("", label="Baseline (optional)", placeholder="http://127.0.0.1:8001",
                              elem_id="vllm-baseline-url")
    return SourceControls(row, url, baseline)


def dashboard_section(vh: ServerHandlers) -> None:
    """The "vLLM dashboard" section (``#vllm-dashboard``), last on the page: a heading like
    the other sections' (a lone tab at the bottom of a long page read as a stray bar)."""
    first = vh.policy.listed[0] if vh.policy.locked and vh.policy.listed else ""
    gr.Markdown("### vLLM dashboard: a server's whole traffic", elem_id="dashboard-title")
    with gr.Column(elem_id="vllm-dashboard"):
        gr.Markdown("All of a vLLM server's traffic, from the counters at its `/metrics` (cumulative "
                    "since it started; the rate chart shows what happened between two scrapes).")
        with gr.Row(equal_height=True):
            url = gr.Textbox(first, label="vLLM server URL", placeholder="http://127.0.0.1:8000",
                             elem_id="dashboard-url", info=_url_info(vh.policy), scale=4)
            watch = gr.Button("Watch", variant="primary", elem_id="dashboard-watch", scale=0, min_width=90)
            stop = gr.Button("Stop", elem_id="dashboard-stop", scale=0, min_width=90)
        summary = gr.HTML(tokens.message_html("Enter the server's URL and press Watch."),
                          elem_id="dashboard-summary")
        with gr.Row():
            pos = gr.Plot(dashboard.position_figure(SpecDecodeCounters(True)), elem_id="dashboard-position-plot",
                          show_label=False)
            rate = gr.Plot(dashboard.rate_figure([]), elem_id="dashboard-rate-plot", show_label=False)
    timer = gr.Timer(DASHBOARD_SECONDS, active=False)
    state = gr.State(None)
    outputs = [state, summary, pos, rate, timer]
    opts = dict(concurrency_limit=8, show_progress="hidden", api_visibility="private")
    watch.click(vh.watch, url, outputs, **opts)
    timer.tick(vh.poll, state, outputs, **opts)
    stop.click(lambda: gr.Timer(active=False), None, timer, queue=False, api_visibility="private")


def traffic_section(th: TrafficHandlers) -> None:
    """The Traffic panel (``#vllm-traffic``): a concurrency sweep against a speculating
    server and a baseline, with its three charts and its table (``mtp-viz bench
    --concurrency`` in the browser). One sweep at a time in the whole app: two at once
    would load the same servers and measure each other."""
    first = th.policy.listed[0] if th.policy.locked and th.policy.listed else ""
    gr.Markdown("### Traffic: does MTP still pay off when many requests share the server?", elem_id="traffic-title")
    with gr.Column(elem_id="vllm-traffic"):
        gr.Markdown(f"At each level, that many clients send requests back to back (closed loop) to the speculating "
                    f"server, then to the baseline (the order flips from level to level). Throughput is all output "
                    f"tokens over the level's wall time; TPOT is each request's time per output token after the "
                    f"first. At most {th.highest} at once, {th.max_requests} requests per level; the prompts are "
                    "the bundled pair's held-out code prompts, greedy.")
        with gr.Row(equal_height=True):
            url = gr.Textbox(first, label="vLLM server (MTP)", placeholder="http://127.0.0.1:8000",
                             elem_id="traffic-url", info=_url_info(th.policy), scale=3)
            baseline = gr.Textbox("", label="Baseline server", placeholder="http://127.0.0.1:8001",
                                  elem_id="traffic-baseline-url", scale=3)
        with gr.Row(equal_height=True):
            levels = gr.Textbox(example_levels(th.highest), label="Concurrent requests (levels)",
                                elem_id="traffic-levels", scale=2)
            requests = gr.Number(min(16, th.max_requests), label=f"Requests per level (≤ {th.max_requests})",
                                 precision=0, elem_id="traffic-requests", scale=1)
            max_tokens = gr.Number(64, label=f"New tokens per request (≤ {MAX_TOKENS})", precision=0,
                                   elem_id="traffic-tokens", scale=1)
            run = gr.Button("Sweep", variant="primary", elem_id="traffic-run", scale=0, min_width=90)
            stop = gr.Button("Stop", elem_id="traffic-stop", scale=0, min_width=90)
        status = gr.HTML(tokens.message_html("Give both servers' URLs and press Sweep."), elem_id="traffic-status")
        with gr.Row():
            plots = [gr.Plot(f, elem_id=i, show_label=False) for f, i in zip(
                th.figures([]), ("traffic-speedup-plot", "traffic-throughput-plot", "traffic-acceptance-plot"))]
        table = gr.HTML("", elem_id="traffic-table")
    sweep = gr.State(None)  # this visitor's Sweep, made on the first press (a callable State would be an API route)
    hidden = dict(api_visibility="private")
    run.click(lambda s: s or Sweep(), sweep, sweep, queue=False, **hidden).then(
        th.sweep, [url, baseline, levels, requests, max_tokens, sweep], [status, *plots, table],
        concurrency_id="traffic", concurrency_limit=1, show_progress="hidden", **hidden)
    stop.click(th.stop, sweep, None, queue=False, api_visibility="private")
