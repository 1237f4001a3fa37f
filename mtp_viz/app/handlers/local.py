"""The app's event handlers and its ``/generate`` API. No torch here: models are reached
through :mod:`mtp_viz.app.runtime.service` (loading) and :mod:`mtp_viz.app.runtime.runs` (running).

Handlers return *frames* (see :mod:`.recorded`, which also holds the handlers of recorded
runs: replay, scrubber, traces and exports).
"""
from __future__ import annotations

import time
from dataclasses import replace
from typing import Any, Iterator

import gradio as gr

from mtp_viz.app.runtime import deploy, runs, service, zerogpu
from mtp_viz.app.runtime.guard import ServerPolicy
from mtp_viz.app.runtime.pairs import PairSpec
from mtp_viz.app.runtime.turns import Turns
from mtp_viz.engine.events import Error
from mtp_viz.errors import UserError
from mtp_viz.sources.local import LocalSource
from mtp_viz.sources.settings import RunSettings
from mtp_viz.views import charts, export, inspector, tokens
from mtp_viz.views.frame import OUTPUTS, Frame, cleared

from . import beside, form
from .frames import message, outputs
from .gate import CUSTOM, Gate
from .profile import Profiling
from .recorded import Traces

# #experts' line under its switch: before a pair is loaded, and for a mixture of experts
EXPERTS_WAITING = "For a mixture-of-experts target (the 26B-A4B); on offer once such a pair is loaded."
EXPERTS_ON = ("Counts, per layer, the distinct experts each forward's router picks "
              "(the chart “Experts touched per verification”).")
API_FRAME_SECONDS = 0.25  # the /generate stream sends the events so far at most this often


def refused(e: UserError) -> Frame:
    """A run that could not start: its sentence, in #status and in the speculative pane."""
    return message(str(e), level="error") | Frame(spec=tokens.placeholder_html("No run: " + str(e)))


def starting(baseline: bool, step_mode_off: bool, empty_figures: dict) -> Frame:
    """What a run shows as it starts: empty panes and charts, whether the baseline takes
    turns with it, and why step mode is off where it is."""
    return cleared("Waiting for the model…", "The baseline takes turns with the speculative run."
                   if baseline else "Baseline off.", empty_figures,
                   caption="Step mode is off on ZeroGPU hardware: a paused run would hold the shared GPU."
                   if step_mode_off else "")


def experts_updates(st: service.LoadState) -> tuple:
    """``#experts`` and the experts chart for a pair's place in the loader: once it is
    loaded, on offer and shown for a mixture of experts, and for a dense one the switch off
    with the reason and the chart hidden, since it cannot apply (else both unchanged)."""
    if st.status != service.Load.READY:
        return gr.skip(), gr.skip()
    if st.pair.is_moe:
        return gr.update(interactive=True, info=EXPERTS_ON), gr.update(visible=True)
    return gr.update(value=False, interactive=False, info=charts.DENSE), gr.update(visible="hidden")


def api_stream(source: LocalSource, s: RunSettings, sess: runs.Session, ticket: Any) -> Iterator[list[dict]]:
    """``/generate``'s stream of a run on ``source``: the event dicts so far, at most every
    :data:`API_FRAME_SECONDS`, and the whole run last; the engine's ``ticket`` left at the end."""
    events: list[dict] = []
    worker = runs.Worker(lambda: source.events(s, sess.stop), sess.stop)
    last = 0.0
    try:
        for batch in worker.batches(API_FRAME_SECONDS):
            events.extend(e.to_dict() for e in batch)
            # news at most every API_FRAME_SECONDS; the same list again after a quiet
            # second, so a client that left is noticed and its worker stopped
            quiet = time.monotonic() - last >= runs.HEARTBEAT
            if time.monotonic() - last >= API_FRAME_SECONDS and (batch or quiet):
                last = time.monotonic()
                yield list(events)
    finally:
        worker.close()
        ticket.leave()
    yield events


class Handlers:
    """One instance per demo, shared by all sessions (per-session state travels in
    ``gr.State`` as a :class:`runs.Session`)."""

    def __init__(self, loader: service.PairLoader, presets: dict, default: tuple[str, str | None],
                 cap: int, prompt_cap: int, empty_figures: dict | None = None, peers: beside.Peers | None = None):
        self.loader, self.presets, self.default = loader, presets, default
        self.peers = peers or beside.Peers(ServerPolicy(loader.allow))   # what Measure may time beside
        self.cap, self.prompt_cap = cap, prompt_cap
        self.runs = zerogpu.on_gpu()  # model work; under spaces.GPU on ZeroGPU hardware
        # the engine's line: runs at once (one by default, so timings never share the CPU);
        # Run, Measure and /generate join it once their pair is ready (runtime.turns)
        self.engine = Turns(deploy.env_int("MTP_VIZ_CONCURRENCY", 1))
        self.gate = Gate(loader, presets, self.engine)   # which pair, waiting for it and for the engine
        self.profiling = Profiling(self.gate, self.settings)   # the Measure tab's cost profile
        self.measuring = beside.Measuring(self.gate, self.peers, self.settings)   # Measure, beside Run
        self.step_mode_ok = not zerogpu.zero_gpu()  # a paused run would hold the shared GPU
        self.empty_figures = empty_figures or charts.all_figures([])  # shared, never mutated
        self.downloads = export.Downloads()
        self.traces = Traces(self.empty_figures, self.downloads)   # replay, traces, scrubber, downloads

    def experts_switch(self, key: str, custom_target: str, custom_drafter: str, target_precision: Any = None,
                       drafter_precision: Any = None, engine: Any = None):
        """``#experts`` and the experts chart for the picked pair (:func:`experts_updates`)."""
        try:
            spec = self.gate.asked(key, custom_target, custom_drafter, target_precision, drafter_precision, engine)
        except UserError:
            return gr.skip(), gr.skip()
        return experts_updates(self.loader.state(spec))

    # ------------------------------------------------------------ runs

    def settings(self, v: dict[str, Any]) -> RunSettings:
        """The form's values as run settings, every field checked (one sentence each)."""
        return form.form_settings(v, self.cap, self.prompt_cap)

    def source(self, pair: Any, sess: runs.Session) -> LocalSource:
        """The local engine on ``pair``, its schedules remembered by the visitor's session."""
        return LocalSource(pair, sess.schedules, call=self.runs)

    def run(self, values: dict[str, Any], sess: runs.Session | None):
        """The speculative run and the baseline, taking turns, streamed as frames for the outputs."""
        sess = sess or runs.Session()
        sess.new_run(step_mode=bool(values.get("step_mode")) and self.step_mode_ok)
        reset = starting(values["baseline"], bool(values.get("step_mode")) and not self.step_mode_ok,
                         self.empty_figures)
        try:
            s = replace(self.settings(values), top=inspector.TOP)  # the inspector's candidates
            spec = self.gate.asked_by(values)
            sess.faster = sess.beside(spec.weights)   # what a Measure timed beside this pair
            yield outputs(reset | Frame(status=self.gate.model_line(spec)), sess, gr.update(interactive=False))
            for item in self.gate.enter(spec, sess, s):
                if isinstance(item, Frame):
                    yield outputs(item)
                else:
                    pair, ticket = item
        except UserError as e:
            yield outputs(refused(e), sess, gr.update(interactive=False))
            return
        try:
            for f in runs.compare_frames(self.source(pair, sess), s, sess,
                                         frame_interval=deploy.env_frame_interval()):
                yield outputs(f)
        except UserError as e:
            yield outputs(refused(e))
        finally:
            ticket.leave()
        yield outputs(Frame(), replay=gr.update(interactive=bool(sess.spec and sess.ar)))

    @staticmethod
    def stop(sess: runs.Session | None) -> None:
        if sess is not None:
            sess.stop.set()

    @staticmethod
    def step_mode(sess: runs.Session | None, on: bool) -> None:
        """``#step-mode`` switched during a run: pause from the next phase on, or let
        a waiting run go on by itself."""
        if sess is not None:
            sess.gate.on = bool(on)

    @staticmethod
    def next_step(sess: runs.Session | None):
        """``#next``: let a run paused by step mode do its next phase."""
        if sess is None or not sess.gate.advance():
            return tokens.message_html("Nothing is waiting: tick Step mode, then Run.", level="warn")
        return gr.skip()

    # ------------------------------------------------------------ the /generate API

    def api_generate(self, prompt: str, model: str = "", mode: str = "speculative", drafter: str = "auto",
                     max_new_tokens: int = 64, draft_tokens: int = 4, schedule: str = "constant",
                     temperature: float = 0.0, top_p: float = 1.0, top_k: int = 0,
                     seed: int | None = None, chat: bool = True) -> Iterator[list[dict]]:
        """Generate with the local engine and stream its events.

        Yields the list of event dicts so far (as `mtp-viz generate --jsonl` prints them);
        the last value is the whole run. Bad input yields one `error` event.

        Args:
            prompt: the prompt text.
            model: "" for the app's default pair; else a preset key, hub id or folder.
            mode: "speculative" or "autoregressive".
            drafter: "auto", "mtp", "model" or "lookup".
            max_new_tokens: tokens to generate (capped by the deployment).
            draft_tokens: the schedule's first draft length.
            schedule: constant, heuristic, heuristic_transient, confidence or optimal.
            temperature: 0 for greedy decoding.
            top_p: nucleus sampling mass (1 disables).
            top_k: top-k sampling (0 disables).
            seed: sampling seed (none: fresh entropy).
            chat: apply the chat template when the model has one.
        """
        sess = runs.Session()
        try:
            model = form.text(model, "The model").strip()
            spec = PairSpec(model) if model else PairSpec(*self.default)   # the default precisions and engine
            self.loader.allow.check(spec.target, spec.drafter)
            s = form.api_settings(prompt, mode, drafter, max_new_tokens, draft_tokens, schedule, temperature,
                                  top_p, top_k, seed, chat, self.cap, self.prompt_cap)
            for item in self.gate.enter(spec, sess):
                if isinstance(item, Frame):
                    yield []   # still waiting: lets the server notice a client that left
                else:
                    pair, ticket = item
        except UserError as e:
            yield [Error(message=str(e)).to_dict()]
            return
        yield from api_stream(self.source(pair, sess), s, sess, ticket)


__all__ = ["API_FRAME_SECONDS", "CUSTOM", "EXPERTS_ON", "EXPERTS_WAITING", "OUTPUTS", "Handlers", "api_stream",
           "experts_updates", "outputs", "refused", "starting"]
