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

from mtp_viz.app.runtime import runs, service, work, zerogpu
from mtp_viz.app.runtime.guard import ServerPolicy
from mtp_viz.app.runtime.turns import Turns, ahead_words
from mtp_viz.views import charts, export, inspector, stats, tokens
from mtp_viz.views.frame import Frame, cleared
from mtp_viz.engine.events import Error
from mtp_viz.errors import UserError, clip
from mtp_viz.sources.local import LocalSource
from mtp_viz.sources.precision import Precision
from mtp_viz.sources.settings import RunSettings

from . import beside, form
from .recorded import OUTPUTS, Recorded, message, outputs

CUSTOM = "custom"
# #experts' line under its switch: before a pair is loaded, and for a mixture of experts
EXPERTS_WAITING = "For a mixture-of-experts target (the 26B-A4B); on offer once such a pair is loaded."
EXPERTS_ON = ("Counts, per layer, the distinct experts each forward's router picks "
              "(the chart “Experts touched per verification”).")
API_FRAME_SECONDS = 0.25  # the /generate stream sends the events so far at most this often


def ran_in(pair: Any) -> str:
    """What a loaded pair's models run in, read from them: " (target int8, drafter float32)"."""
    p = getattr(pair, "precision", None) or {}
    if not p.get("target"):
        return ""
    return f" (target {p['target']}" + (f", drafter {p['drafter']})" if p.get("drafter") else ")")


def compiled_line(pair: Any) -> tuple[str, str]:
    """What compiling a loaded pair did, for its status line: (" Compiled in 74.2 s (5
    graphs), kept out of every run's timing.", "info"), the one sentence saying why it fell
    back to eager decoding ("warn"), or ("", "info") for a pair not asked compiled."""
    note = getattr(pair, "compile_note", "") or ""
    if note:
        return f" Compiling fell back to eager decoding: {note}", "warn"
    fast = getattr(pair, "fast", None)
    if fast is None:
        return "", "info"
    step = getattr(pair, "draft_step", None)
    graphs = len(fast.shapes.seconds) + (len(step.shapes.seconds) if step is not None else 0)
    return (f" Compiled in {getattr(pair, 'compile_seconds', 0.0):.1f} s ({graphs} graph{'s' if graphs != 1 else ''}), "
            "kept out of every run's timing."), "info"


def refused(e: UserError) -> Frame:
    """A run that could not start: its sentence, in #status and in the speculative pane."""
    return message(str(e), level="error") | Frame(spec=tokens.placeholder_html("No run: " + str(e)))


class Handlers(Recorded, beside.Measuring):
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
        self.engine = Turns(service.env_int("MTP_VIZ_CONCURRENCY", 1))
        self.step_mode_ok = not zerogpu.zero_gpu()  # a paused run would hold the shared GPU
        self.empty_figures = empty_figures or charts.all_figures([])  # shared, never mutated
        self.downloads = export.Downloads()

    # ------------------------------------------------------------ models

    def pick(self, key: str, custom_target: str = "", custom_drafter: str = "") -> tuple[str, str | None]:
        """(target, drafter) for a picker choice; UserError for what may not be loaded."""
        if key == CUSTOM:
            target = (custom_target or "").strip()
            if not target:
                raise UserError("Enter a hub id or a local folder for the custom target model.")
            pair = target, (custom_drafter or "").strip() or None
        elif key in self.presets:
            pair = self.presets[key]["target"], self.presets[key]["drafter"]
        else:
            raise UserError("Pick a model pair from the list.")
        self.loader.allow.check(*pair)
        return pair

    @staticmethod
    def precision(target_precision: Any = None, drafter_precision: Any = None) -> Precision:
        """The page's precision fields (``default``: ``MTP_VIZ_DTYPE``, else the device's),
        checked: one sentence for anything else (the API takes any JSON value)."""
        return Precision.of(None, form.text(target_precision or "default", "The target precision"),
                            form.text(drafter_precision or "default", "The drafter precision"))

    @staticmethod
    def compiled(value: Any = None) -> bool:
        """The page's ``#compile`` switch (None, not given: off), checked: one
        sentence for anything but true or false (the API takes any JSON value)."""
        return False if value is None else form.flag(value, "Compiled engine")

    def model_line(self, target: str, drafter: str | None, precision: Precision | None = None,
                   compile: bool = False) -> str:
        st = self.loader.state(target, drafter, precision, compile)
        # a custom name as typed, cut short: a status line is no place for 100,000 characters
        named = next((p["name"] for p in self.presets.values()  # launch's pair in memory, by its models' names
                      if "name" in p and (p["target"], p["drafter"]) == (target, drafter)), None)
        name = named or ("the bundled tiny pair" if target == "tiny" else
                         clip(target) + (f" + {clip(drafter)}" if drafter else ""))
        asked = (f" in {precision.label}" if precision and precision != Precision() else "") + \
            (", compiled" if compile else "")
        if st.status == "queued" and st.ahead:
            return tokens.message_html(f"Waiting to compile {name}{asked}: {ahead_words(st.ahead, 'compile')} "
                                       f"(one at a time)… {time.monotonic() - st.started:.0f} s")
        if st.status in ("queued", "loading"):
            waited = f"… {time.monotonic() - st.started:.0f} s"
            if st.progress is not None:   # compiling the graphs of a default run (sources.compiling)
                return tokens.message_html(f"Compiling {name}{asked} before its first run, {st.progress.line()}{waited}")
            doing = " (then compiling its graphs once, before its first run: a minute or more)" if compile else ""
            return tokens.message_html(f"Loading {name}{asked}{doing}{waited}")
        if st.status == "ready":
            line, level = compiled_line(st.pair) if compile else ("", "info")
            return tokens.message_html(f"Ready: {name}{ran_in(st.pair)}.{line}", level=level)
        if st.status in ("error", "unloaded"):
            return tokens.message_html(st.message, level="error" if st.status == "error" else "warn")
        return tokens.message_html(f"{name[:1].upper()}{name[1:]}{asked} loads on first run (or press Load).")

    def asked(self, key: str, custom_target: str, custom_drafter: str, target_precision: Any = None,
              drafter_precision: Any = None, compiled: Any = None) -> tuple[str, str | None, Precision, bool]:
        """(target, drafter, precision, compile): the pair the form names, each field checked."""
        target, drafter = self.pick(key, custom_target, custom_drafter)
        precision, compile = self.precision(target_precision, drafter_precision), self.compiled(compiled)
        self.loader.allow.check_build(precision, compile)
        return target, drafter, precision, compile

    def load(self, key: str, custom_target: str, custom_drafter: str, target_precision: Any = None,
             drafter_precision: Any = None, compiled: Any = None):
        try:
            target, drafter, precision, compile = self.asked(key, custom_target, custom_drafter, target_precision,
                                                             drafter_precision, compiled)
            self.loader.start(target, drafter, precision, compile)
        except UserError as e:
            return tokens.message_html(str(e), level="error"), gr.Timer(active=False), gr.skip()
        return self.model_line(target, drafter, precision, compile), gr.Timer(active=True), gr.skip()

    def tick(self, key: str, custom_target: str, custom_drafter: str, target_precision: Any = None,
             drafter_precision: Any = None, compiled: Any = None, polled: bool = False):
        """While a pair loads: its status line; once ready, the chat switch follows the
        pair (on only when its tokenizer has a chat template). ``polled``: called by the
        timer itself, which is then left running while the pair loads (:meth:`poll`)."""
        try:
            target, drafter, precision, compile = self.asked(key, custom_target, custom_drafter, target_precision,
                                                             drafter_precision, compiled)
        except UserError:
            return gr.skip(), gr.Timer(active=False), gr.skip()
        st = self.loader.state(target, drafter, precision, compile)
        loading = st.status in ("queued", "loading")
        chat = gr.update(value=st.pair.chat_template is not None) if st.status == "ready" else gr.skip()
        # the timer's own tick leaves it running while the pair loads: a new Timer each second
        # made Gradio rebuild the component's config (a JSON schema) on the thread a compile shares
        timer = gr.skip() if polled and loading else gr.Timer(active=loading)
        return self.model_line(target, drafter, precision, compile), timer, chat

    def poll(self, key: str, custom_target: str, custom_drafter: str, target_precision: Any = None,
             drafter_precision: Any = None, compiled: Any = None):
        """The timer's tick: :meth:`tick`, the timer left running while the pair loads."""
        return self.tick(key, custom_target, custom_drafter, target_precision, drafter_precision, compiled, polled=True)

    def status_line(self, key: str, custom_target: str, custom_drafter: str, target_precision: Any = None,
                    drafter_precision: Any = None, compiled: Any = None):
        """``#model-status`` after a run, which may have loaded the pair: what it runs in."""
        try:
            return self.model_line(*self.asked(key, custom_target, custom_drafter, target_precision,
                                               drafter_precision, compiled))
        except UserError:
            return gr.skip()

    def _ready_pair(self, target: str, drafter: str | None, sess: runs.Session,
                    precision: Precision | None = None, compile: bool = False) -> Iterator[Any]:
        """Wait for the pair, yielding status lines; the last item is the pair (or None)."""
        while (st := self.loader.wait(target, drafter, timeout=0.5, precision=precision,
                                      compile=compile)).status in ("queued", "loading"):
            if sess.stop.is_set():  # the model keeps loading for the next run
                raise UserError("Stopped while the model loads.")
            yield self.model_line(target, drafter, precision, compile)
        if st.status != "ready":
            raise UserError(st.message)
        yield st.pair

    def _waits(self, target: str, drafter: str | None, sess: runs.Session, precision: Precision | None = None,
               compile: bool = False, twin: bool = False) -> Iterator[Any]:
        """Wait for the pair (loading or compiling holds no turn on the engine), then for
        the engine's turn, yielding frames (the pair's line also in ``#model-status``); the
        last item is (pair, held ticket). ``twin``: also wait for the same models on the
        compiled engine (its line in ``#status`` only); the last item is then
        ((pair, compiled pair), ticket)."""
        for item in self._ready_pair(target, drafter, sess, precision, compile):
            if isinstance(item, str):
                yield Frame(status=item, model_status=item)
            else:
                pair = item
        for item in self._ready_pair(target, drafter, sess, precision, True) if twin else ():
            if isinstance(item, str):
                yield Frame(status=item)
            else:
                pair = (pair, item)
        for item in self._turn(sess):
            yield Frame(status=item) if isinstance(item, str) else (pair, item)

    def _turn(self, sess: runs.Session) -> Iterator[Any]:
        """Join the engine's line (the pair is ready by now); yield status lines while
        waiting; the last item is the held :class:`mtp_viz.app.runtime.turns.Ticket`, which the caller leaves."""
        ticket = self.engine.join()
        try:
            while not ticket.wait(0.5):
                if sess.stop.is_set():
                    raise UserError("Stopped while waiting for the engine.")
                yield tokens.message_html(f"Waiting for the engine: {ahead_words(ticket.ahead, 'run')} "
                                          "(one at a time, so timings never share the CPU)…")
        except BaseException:  # Stop, or the visitor left: the place goes
            ticket.leave()
            raise
        yield ticket

    def experts_switch(self, key: str, custom_target: str, custom_drafter: str, target_precision: Any = None,
                       drafter_precision: Any = None, compiled: Any = None):
        """``#experts`` and the experts chart for the picked pair once it is loaded: on
        offer and shown for a mixture of experts; for a dense one the switch off with the
        reason and the chart hidden, since it cannot apply (else both unchanged)."""
        try:
            st = self.loader.state(*self.asked(key, custom_target, custom_drafter, target_precision,
                                               drafter_precision, compiled))
        except UserError:
            return gr.skip(), gr.skip()
        if st.status != "ready":
            return gr.skip(), gr.skip()
        if st.pair.is_moe:
            return gr.update(interactive=True, info=EXPERTS_ON), gr.update(visible=True)
        return gr.update(value=False, interactive=False, info=charts.DENSE), gr.update(visible="hidden")

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
        off = bool(values.get("step_mode")) and not self.step_mode_ok
        reset = cleared("Waiting for the model…", "The baseline takes turns with the speculative run."
                        if values["baseline"] else "Baseline off.", self.empty_figures,
                        caption="Step mode is off on ZeroGPU hardware: a paused run would hold the shared GPU."
                        if off else "")
        try:
            s = replace(self.settings(values), top=inspector.TOP)  # the inspector's candidates
            target, drafter, precision, compile = self.asked(
                values["model"], values["custom_target"], values["custom_drafter"], values.get("target_precision"),
                values.get("drafter_precision"), values.get("compile"))
            sess.faster = sess.beside((target, drafter, precision))   # what a Measure timed beside this pair
            yield outputs(reset | Frame(status=self.model_line(target, drafter, precision, compile)), sess,
                          gr.update(interactive=False))
            for item in self._waits(target, drafter, sess, precision, compile):
                if isinstance(item, Frame):
                    yield outputs(item)
                else:
                    pair, ticket = item
        except UserError as e:
            yield outputs(refused(e), sess, gr.update(interactive=False))
            return
        try:
            for f in self._compiled(pair, s, sess, (target, drafter, precision, compile)):
                yield outputs(f)
            for f in runs.compare_frames(self.source(pair, sess), s, sess,
                                         frame_interval=service.env_frame_interval()):
                yield outputs(f)
        except UserError as e:
            yield outputs(refused(e))
        finally:
            ticket.leave()
        yield outputs(Frame(), replay=gr.update(interactive=bool(sess.spec and sess.ar)))

    def _compiled(self, pair: Any, s: RunSettings, sess: runs.Session, asked: tuple) -> Iterator[Frame]:
        """A compiled pair's missing graphs for ``s``, compiled before the run's first token,
        with progress in ``#status`` and ``#model-status`` (no frame when none is missing);
        then the pair's line again (what compiling took, now)."""
        compiled = False
        for line in runs.compile_lines(pair, s, sess.stop):
            compiled = True
            yield Frame(status=line, model_status=line)
        if compiled:
            yield Frame(model_status=self.model_line(*asked))

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
        events: list[dict] = []
        sess = runs.Session()
        try:
            model = form.text(model, "The model")
            target, drafter_spec = (model.strip(), None) if model.strip() else self.default
            self.loader.allow.check(target, drafter_spec)
            s = form.api_settings(prompt, mode, drafter, max_new_tokens, draft_tokens, schedule, temperature,
                                  top_p, top_k, seed, chat, self.cap, self.prompt_cap)
            for item in self._waits(target, drafter_spec, sess):
                if isinstance(item, Frame):
                    yield []   # still waiting: lets the server notice a client that left
                else:
                    pair, ticket = item
        except UserError as e:
            yield [Error(message=str(e)).to_dict()]
            return
        source = self.source(pair, sess)
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


__all__ = ["CUSTOM", "EXPERTS_ON", "EXPERTS_WAITING", "OUTPUTS", "Handlers", "outputs", "refused", "compiled_line"]
