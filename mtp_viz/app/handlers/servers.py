"""Handlers of the server source (vLLM or llama.cpp, by what the server answers) and the
server dashboard (see docs/vllm.md). No torch here.

**Source.** Run sends the prompt to the server at ``#vllm-url`` (it must speculate and
report per-step metrics) and then, with "Then run autoregressive" on and a baseline URL
given, to the baseline server (the same model without speculation), through the same
comparison as the local engine (:func:`mtp_viz.app.runtime.runs.compare_frames` with a
:class:`mtp_viz.sources.servers.ServerSource`, vLLM or llama.cpp by what the server answers).

**Dashboard.** Watch scrapes a server's ``/metrics`` every ``DASHBOARD_SECONDS`` and
charts its spec-decode counters over all the server's traffic
(:mod:`mtp_viz.views.dashboard`).

Every URL goes through :class:`mtp_viz.app.runtime.guard.ServerPolicy` first. A server's
failure is told in its visitor's sentence (:meth:`ServerError.visitor`): the address the
visitor typed, never an HTTP status or a path the server answered. A run holds at most the
tokens asked for (the source ends a server that sends more with one sentence), so its
frames are bounded by the form's max new tokens.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field, replace
from typing import Any

import gradio as gr

from mtp_viz.app.runtime import deploy, runs
from mtp_viz.app.runtime.guard import ServerPolicy
from mtp_viz.app.runtime.pairs import PairSpec
from mtp_viz.engine.events import Step
from mtp_viz.errors import UserError
from mtp_viz.sources import open_server
from mtp_viz.sources.base import Capabilities
from mtp_viz.sources.http import ServerError
from mtp_viz.sources.local import LocalSource
from mtp_viz.sources.prometheus import SpecDecodeCounters
from mtp_viz.sources.servers import Servers, ServerSource
from mtp_viz.views import dashboard, tokens
from mtp_viz.views.frame import Frame, cleared

from .frames import message, outputs
from .local import Handlers, refused

VLLM = "vllm"                 # the model picker's key for this source
DASHBOARD_SECONDS = 2.0       # between two scrapes of /metrics
DASHBOARD_HISTORY = 900       # scrapes kept per watcher: half an hour at 2 s
HINT = ("A vLLM server with Gemma 4 MTP fills the speculative pane, one without speculation the "
        "baseline pane. vLLM reports how many drafts it rejected at each step (✗N after the step), "
        "not which tokens; it sends a response's steps with its last chunk. The vLLM dashboard section "
        "charts the server's counters over all its traffic.")



def capabilities(key: str) -> Capabilities:
    """What the source the picker's ``key`` names can do: the page reads this, never the key."""
    return ServerSource.capabilities if key == VLLM else LocalSource.capabilities


class ServerHandlers:
    """Handlers of a server source (vLLM or llama.cpp, told apart by what it answers) and the
    dashboard; the form checks are the local engine's (:meth:`Handlers.settings`)."""

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
            s = replace(self.h.settings(values), experts=False)  # a server reports no routing (the chart says so)
            if servers.baseline is None:
                s = s.only("speculative")
        except UserError as e:
            yield outputs(refused(e), sess, gr.update(interactive=False))
            return
        ar = ("The baseline server runs after the speculating one." if s.baseline else
              "No baseline: give a baseline server's URL and turn on “Then run autoregressive”.")
        step_note = ("Step mode pauses only the local engine: a vLLM server sends its steps when it finishes."
                     if values.get("step_mode") else "")
        status = tokens.message_html(f"Sending the prompt to the vLLM server at {servers.spec}…")
        yield outputs(cleared("Waiting for the server: its steps come with its last chunk.", ar, self.h.empty_figures,
                              caption=tokens.message_html(step_note, level="warn"), status=status),
                      sess, gr.update(interactive=False))
        source = open_server(servers, sentence=ServerError.visitor)   # vLLM or llama.cpp, by what it answers
        for f in runs.compare_frames(source, s, sess, frame_interval=deploy.env_frame_interval()):
            if f.last and f.status is not None and not sess.stop.is_set():  # a run that ended well
                f = f | message(self.done_line(sess, source.label))
            yield outputs(f)
        yield outputs(Frame(), replay=gr.update(interactive=bool(sess.spec and sess.ar)))

    @staticmethod
    def done_line(sess: runs.Session, software: str = "the server") -> str:
        steps = [e for e in sess.spec if isinstance(e, Step) and e.draft_tokens]
        drafted, kept = sum(e.draft_tokens for e in steps), sum(e.accepted for e in steps)
        line = (f"Done: {software} kept {kept} of {drafted} drafts in {len(steps)} verify steps; ✗N counts the "
                "drafts it rejected at a step (not which).")
        return line + (" Race replay plays both runs on their timings." if sess.ar else "")

    @staticmethod
    def measure(values: dict[str, Any], repeats: Any, sess: runs.Session | None):
        yield outputs(message("Measure repeats the local engine; for vLLM servers run mtp-viz bench --server URL "
                              "--baseline-server URL.", level="warn"), sess)

    def picked(self, key: str) -> str:
        """``#model-status`` when the picker changes: what this source needs, else the
        state of the picked pair."""
        if capabilities(key).remote:
            return tokens.message_html("Give the server's URL, then Run (Load checks the servers).")
        try:
            return self.h.gate.model_line(PairSpec(*self.h.gate.pick(key)))
        except UserError:   # a custom pair not typed in yet
            return gr.skip()

    def load(self, key: str, custom_target: str, custom_drafter: str, url: str, baseline: str,
             target_precision: Any = None, drafter_precision: Any = None, engine: Any = None):
        """Load: the local pair (in the precisions and on the engine asked), or, for this
        source, a check of the servers."""
        if not capabilities(key).remote:
            return self.h.gate.load(key, custom_target, custom_drafter, target_precision, drafter_precision, engine)
        return self.probe(url, baseline), gr.Timer(active=False), gr.skip(), gr.skip()

    def probe(self, url: str, baseline: str) -> str:
        """One line on the servers: whether they answer, and whether each speculates."""
        try:
            servers = self.servers(url, baseline)
            source = open_server(servers)
            parts, level = [], "info"
            for role, u in (("server", servers.spec), ("baseline", servers.baseline)):
                if u is None:
                    continue
                speculates = source.speculates(u)
                k = len(source.counters(u).accepted_per_pos) if speculates else 0
                parts.append(f"the {role} at {u} ({source.label}) "
                             + (f"speculates ({k} drafts per step)" if k else "speculates" if speculates
                                else "does not speculate"))
                level = level if speculates == (role == "server") else "warn"
        except UserError as e:
            return tokens.message_html(said(e), level="error")
        return tokens.message_html("Ready: " + "; ".join(parts) + ".", level=level)

    # ------------------------------------------------------------ the dashboard

    def watch(self, url: str):
        """Start watching: the first scrape now, the next ones on the timer."""
        try:
            url = self.policy.check(url)
            w = Watch(url, time.monotonic(), open_server(Servers(url)))
        except UserError as e:
            error = tokens.message_html(said(e), level="error")
            return None, error, gr.skip(), gr.skip(), gr.Timer(active=False)
        return self.poll(w)

    @staticmethod
    def poll(w: "Watch | None"):
        """One scrape: the summary line and both figures; a failure stops the polling."""
        if w is None:
            return None, gr.skip(), gr.skip(), gr.skip(), gr.Timer(active=False)
        try:
            counters = w.source.counters(w.url)
        except UserError as e:
            return w, tokens.message_html(said(e), level="error"), gr.skip(), gr.skip(), gr.Timer(active=False)
        # the history keeps counts, not the model names of every scrape (up to 16 KiB each)
        w.history.append((time.monotonic() - w.started, replace(counters, models=())))
        del w.history[:-DASHBOARD_HISTORY]
        return (w, dashboard.summary_html(w.url, w.history, DASHBOARD_SECONDS), dashboard.position_figure(counters),
                dashboard.rate_figure(w.history), gr.Timer(active=True))


def said(e: UserError) -> str:
    """A sentence for a visitor: a server's failure without its HTTP status or path."""
    return e.visitor() if isinstance(e, ServerError) else str(e)


@dataclass
class Watch:
    """One visitor's dashboard: the server and its scrapes, ``(seconds since watching, counters)``."""
    url: str
    started: float
    source: Any                 # the server as a source (sources.open_server): how to read its counters
    history: list[tuple[float, SpecDecodeCounters]] = field(default_factory=list)


__all__ = ["DASHBOARD_SECONDS", "HINT", "VLLM", "ServerHandlers", "Watch", "capabilities"]
