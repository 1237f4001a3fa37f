"""The app's vLLM source and its server dashboard (see docs/vllm.md). No torch here.

**Source.** The model picker's "vLLM server" entry shows ``#vllm-url`` and
``#vllm-baseline-url``. Run sends the prompt to the server at ``#vllm-url`` (it must
speculate and report per-step metrics) and then, with "Then run autoregressive" on and a
baseline URL given, to the baseline server (the same model without speculation). Both
stream through the local engine's panes, charts, compare and Race replay:
:func:`runs.compare_frames` takes the servers' source
(:class:`mtp_viz.sources.vllm.source.VllmSource`) as it takes the local engine's; its runs go
one after the other. vLLM reports how many drafts it
rejected at each step but not their tokens, so a pane shows that count after the step
(``span.mv-rejcount``, see :func:`mtp_viz.app.views.tokens.rejected_count_html`); it
sends a response's steps with its last chunk, so they appear when the server finishes.

**Dashboard.** The "vLLM dashboard" tab scrapes a server's ``/metrics`` every
``DASHBOARD_SECONDS`` while watching and charts its spec-decode counters over all the
server's traffic (:mod:`.dashboard`).

Every URL goes through :class:`.vllm_guard.ServerPolicy` first.
"""
from __future__ import annotations

import html
import time
from dataclasses import dataclass, field
from typing import Any

import gradio as gr

from mtp_viz.sources.vllm import client as vllm_client
from mtp_viz.sources.vllm.source import Servers, VllmSource
from mtp_viz.errors import UserError
from mtp_viz.engine.events import Step
from mtp_viz.sources.vllm.prometheus import SpecDecodeCounters
from mtp_viz.app.views import dashboard, stats, tokens
from mtp_viz.app.runtime import runs, service
from mtp_viz.app.handlers.local import Handlers, frame
from mtp_viz.app.runtime.guard import ServerPolicy

VLLM = "vllm"                 # the model picker's key for this source
DASHBOARD_SECONDS = 2.0       # between two scrapes of /metrics
DASHBOARD_HISTORY = 900       # scrapes kept per watcher: half an hour at 2 s
HINT = ("A vLLM server with Gemma 4 MTP fills the speculative pane, one without speculation the "
        "baseline pane. vLLM reports how many drafts it rejected at each step (✗N after the step), "
        "not which tokens; it sends a response's steps with its last chunk. The vLLM dashboard tab "
        "charts the server's counters over all its traffic.")


def choices(policy: ServerPolicy) -> list[tuple[str, str]]:
    """The picker's entry for this source, unless the deployment does not offer it."""
    return [("vLLM server (enter its URL)", VLLM)] if policy.offered else []


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


class VllmHandlers:
    """Handlers of the vLLM source and the dashboard; the form checks are the local
    engine's (:meth:`Handlers.settings`)."""

    def __init__(self, h: Handlers, policy: ServerPolicy):
        self.h, self.policy = h, policy

    def servers(self, url: str, baseline: str | None) -> Servers:
        spec = self.policy.check(url)
        base = self.policy.check(baseline) if (baseline or "").strip() else None
        return Servers(spec, base)

    def run(self, values: dict[str, Any], sess: runs.Session | None):
        """The speculating server, then the baseline server, streamed as the local run is."""
        sess = sess or runs.Session()
        sess.new_run()
        try:
            servers = self.servers(values["vllm_url"], values["vllm_baseline_url"])
            s = self.h.settings(values)
            if servers.baseline is None:
                s = s.only("speculative")
        except UserError as e:
            yield frame({"status": tokens.message_html(str(e), level="error"),
                         "spec": tokens.placeholder_html("No run: " + str(e))}, sess, gr.update(interactive=False))
            return
        ar = ("The baseline server runs after the speculating one." if s.baseline else
              "No baseline: give a baseline server's URL and turn on “Then run autoregressive”.")
        step_note = ("Step mode pauses only the local engine: a vLLM server sends its steps when it finishes."
                     if values.get("step_mode") else "")
        empty = stats.stats_html(stats.RunStats())
        cleared = {"spec": tokens.placeholder_html("Waiting for the server: its steps come with its last chunk."),
                   "ar": tokens.placeholder_html(ar), "spec_stats": empty, "ar_stats": empty,
                   "compare": stats.compare_html(stats.RunStats(), stats.RunStats(), greedy=True),
                   "theory": "", "figures": self.h.empty_figures,
                   "caption": tokens.message_html(step_note, level="warn")}
        status = tokens.message_html(f"Sending the prompt to the vLLM server at {servers.spec}…")
        yield frame({**cleared, "status": status}, sess, gr.update(interactive=False))
        for f in runs.compare_frames(VllmSource(servers), s, sess, frame_interval=service.env_frame_interval()):
            if "theory" in f and "status" in f and not sess.stop.is_set():  # the last frame of a run
                f["status"] = tokens.message_html(self.done_line(sess))
            yield frame(f)
        yield frame({}, replay=gr.update(interactive=bool(sess.spec and sess.ar)))

    @staticmethod
    def done_line(sess: runs.Session) -> str:
        steps = [e for e in sess.spec if isinstance(e, Step) and e.draft_len]
        drafted, kept = sum(e.draft_len for e in steps), sum(e.accepted for e in steps)
        line = (f"Done: vLLM kept {kept} of {drafted} drafts in {len(steps)} verify steps; ✗N counts the "
                "drafts it rejected at a step (not which).")
        return line + (" Race replay plays both runs on their timings." if sess.ar else "")

    @staticmethod
    def measure(values: dict[str, Any], repeats: Any, sess: runs.Session | None):
        yield frame({"status": tokens.message_html(
            "Measure repeats the local engine; for vLLM servers run mtp-viz bench --server URL "
            "--baseline-server URL.", level="warn")}, sess)

    def picked(self, key: str) -> str:
        """``#model-status`` when the picker changes: what this source needs, else the
        state of the picked pair."""
        if key == VLLM:
            return tokens.message_html("Give the server's URL, then Run (Load checks the servers).")
        try:
            return self.h.model_line(*self.h.pick(key))
        except UserError:   # a custom pair not typed in yet
            return gr.skip()

    def load(self, key: str, custom_target: str, custom_drafter: str, url: str, baseline: str):
        """Load: the local pair, or, for this source, a check of the servers."""
        if key != VLLM:
            return self.h.load(key, custom_target, custom_drafter)
        return self.probe(url, baseline), gr.Timer(active=False), gr.skip()

    def probe(self, url: str, baseline: str) -> str:
        """One line on the servers: whether they answer, and whether each speculates."""
        try:
            servers = self.servers(url, baseline)
            parts, level = [], "info"
            for role, u in (("server", servers.spec), ("baseline", servers.baseline)):
                if u is None:
                    continue
                vllm_client.served_models(u)
                c = vllm_client.scrape(u)
                speculates = f"speculates ({len(c.accepted_per_pos)} drafts per step)"
                parts.append(f"the {role} at {u} " + (speculates if c.enabled else "does not speculate"))
                level = level if c.enabled == (role == "server") else "warn"
        except UserError as e:
            return tokens.message_html(str(e), level="error")
        return tokens.message_html("Ready: " + "; ".join(parts) + ".", level=level)

    # ------------------------------------------------------------ the dashboard

    def watch(self, url: str):
        """Start watching: the first scrape now, the next ones on the timer."""
        try:
            w = Watch(self.policy.check(url), time.monotonic())
        except UserError as e:
            error = tokens.message_html(str(e), level="error")
            return None, error, gr.skip(), gr.skip(), gr.Timer(active=False)
        return self.poll(w)

    @staticmethod
    def poll(w: "Watch | None"):
        """One scrape: the summary line and both figures; a failure stops the polling."""
        if w is None:
            return None, gr.skip(), gr.skip(), gr.skip(), gr.Timer(active=False)
        try:
            counters = vllm_client.scrape(w.url)
        except UserError as e:
            return w, tokens.message_html(str(e), level="error"), gr.skip(), gr.skip(), gr.Timer(active=False)
        w.history.append((time.monotonic() - w.started, counters))
        del w.history[:-DASHBOARD_HISTORY]
        return (w, dashboard_summary_html(w), dashboard.position_figure(counters),
                dashboard.rate_figure(w.history), gr.Timer(active=True))


@dataclass
class Watch:
    """One visitor's dashboard: the server and its scrapes, ``(seconds since watching, counters)``."""
    url: str
    started: float
    history: list[tuple[float, SpecDecodeCounters]] = field(default_factory=list)


def dashboard_summary_html(w: Watch) -> str:
    """The server's totals and how long it has been watched (escaped: text only)."""
    t, counters = w.history[-1]
    return (f'<div class="mv-msg mv-msg-info">{html.escape(dashboard.summary_line(counters))}'
            f'<br><small>{html.escape(w.url)} · {len(w.history)} scrapes over {t:.0f} s, every '
            f'{DASHBOARD_SECONDS:g} s</small></div>')


def dashboard_tab(vh: VllmHandlers) -> None:
    """The "vLLM dashboard" tab (``#vllm-dashboard``)."""
    first = vh.policy.listed[0] if vh.policy.locked and vh.policy.listed else ""
    with gr.Tab("vLLM dashboard", elem_id="vllm-dashboard"):
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
