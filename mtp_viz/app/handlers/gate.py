"""The gate every handler of a local run passes: which pair the form names (each field
checked, made once into a :class:`mtp_viz.app.runtime.pairs.PairSpec`), where that pair
stands in the loader (its line in ``#model-status``), waiting for it to load, then for
the engine's turn, saying so in the status line as it waits.
Composed into :class:`.local.Handlers` (``h.gate``) and used by Run, Measure and
``/generate`` alike; no torch here."""
from __future__ import annotations

import time
from typing import Any, Iterator

import gradio as gr

from mtp_viz.app.runtime import loading, runs, service
from mtp_viz.app.runtime.pairs import PairSpec, pair_key
from mtp_viz.app.runtime.service import Load
from mtp_viz.app.runtime.turns import Turns, ahead_words
from mtp_viz.engine import engines
from mtp_viz.errors import UserError, clip
from mtp_viz.sources.settings import RunSettings
from mtp_viz.views import tokens
from mtp_viz.views.frame import Frame

from . import form

CUSTOM = "custom"   # the picker's entry for a pair typed in


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
    mounted = getattr(pair, "mounted", None)   # what its engine compiled (engine.decoder.Mounted)
    if mounted is None or not mounted.compiles:
        return "", "info"
    graphs = len(mounted.graphs())
    return (f" Compiled in {getattr(pair, 'compile_seconds', 0.0):.1f} s ({graphs} graph{'s' if graphs != 1 else ''}), "
            "kept out of every run's timing."), "info"


def pair_name(spec: PairSpec, presets: dict) -> str:
    """How the status line names ``spec``'s models: a preset's name, the bundled pair, or
    a custom name as typed, cut short (a status line is no place for 100,000 characters)."""
    named = next((p["name"] for p in presets.values()  # launch's pair in memory, by its models' names
                  if "name" in p and (p["target"], p["drafter"]) == (spec.target, spec.drafter)), None)
    return named or ("the bundled tiny pair" if spec.target == "tiny" else
                     clip(spec.target) + (f" + {clip(spec.drafter)}" if spec.drafter else ""))


def model_status(spec: PairSpec, st: service.LoadState, name: str) -> str:
    """``#model-status`` for ``spec`` (called ``name``) where it stands in the loader
    (``st``): waiting to compile, loading or compiling, ready (what it runs in, what
    compiling took), failed or unloaded, or not asked for yet."""
    asked, compiles = spec.asked_words(), engines.ENGINES[spec.engine].compiles
    if st.status == Load.QUEUED and st.ahead:
        return tokens.message_html(f"Waiting to compile {name}{asked}: {ahead_words(st.ahead, 'compile')} "
                                   f"(one at a time)… {time.monotonic() - st.started:.0f} s")
    if st.busy:
        waited = f"… {time.monotonic() - st.started:.0f} s"
        if st.progress is not None:   # compiling the graphs of a default run (sources.compiling)
            return tokens.message_html(f"Compiling {name}{asked} before its first run, {st.progress.line()}{waited}")
        doing = " (then compiling its graphs once, before its first run: a minute or more)" if compiles else ""
        return tokens.message_html(f"Loading {name}{asked}{doing}{waited}")
    if st.status == Load.READY:
        line, level = compiled_line(st.pair) if compiles else ("", "info")
        return tokens.message_html(f"Ready: {name}{ran_in(st.pair)}.{line}", level=level)
    if st.ended:
        return tokens.message_html(st.message, level="error" if st.status == Load.ERROR else "warn")
    return tokens.message_html(f"{name[:1].upper()}{name[1:]}{asked} loads on first run (or press Load).")


def loaded_choice(loader: service.PairLoader, presets: dict, leaving: str) -> str | None:
    """The picker's entry for the pair used most recently that is loaded (not
    ``leaving``), if any: where a failed load puts the picker back."""
    for ready in reversed(loader.loaded()):
        for key, p in presets.items():
            if key != leaving and pair_key(p["target"], p["drafter"]) == ready[:2]:
                return key
    return None


class Gate:
    """The pair a form names and the way to it: shared by every session of a demo."""

    def __init__(self, loader: service.PairLoader, presets: dict, engine: Turns):
        self.loader, self.presets, self.engine = loader, presets, engine

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

    def model_line(self, spec: PairSpec) -> str:
        """``#model-status``: where ``spec`` stands in the loader (:func:`model_status`)."""
        return model_status(spec, self.loader.state(spec), pair_name(spec, self.presets))

    def asked(self, key: str, custom_target: str, custom_drafter: str, target_precision: Any = None,
              drafter_precision: Any = None, engine: Any = None) -> PairSpec:
        """The pair the form names (the fields of :meth:`mtp_viz.app.page.wiring.Page.pair`), each
        field checked, and allowed here."""
        target, drafter = self.pick(key, custom_target, custom_drafter)
        spec = PairSpec(target, drafter, form.precision_of(target_precision, drafter_precision), form.engine_of(engine))
        self.loader.allow.check_build(spec.precision, spec.engine)
        return spec

    def asked_by(self, values: dict[str, Any]) -> PairSpec:
        """:meth:`asked` of a run's form values (by form name)."""
        return self.asked(values["model"], values["custom_target"], values["custom_drafter"],
                          values.get("target_precision"), values.get("drafter_precision"), values.get("engine"))

    def load(self, key: str, custom_target: str, custom_drafter: str, target_precision: Any = None,
             drafter_precision: Any = None, engine: Any = None):
        try:
            spec = self.asked(key, custom_target, custom_drafter, target_precision, drafter_precision, engine)
            self.loader.start(spec)
        except UserError as e:
            return tokens.message_html(str(e), level="error"), gr.Timer(active=False), gr.skip(), gr.skip()
        return self.model_line(spec), gr.Timer(active=True), gr.skip(), gr.skip()

    def tick(self, key: str, custom_target: str, custom_drafter: str, target_precision: Any = None,
             drafter_precision: Any = None, engine: Any = None, polled: bool = False):
        """While a pair loads: its status line; once ready, the chat switch follows the
        pair (on only when its tokenizer has a chat template). ``polled``: called by the
        timer itself, which is then left running while the pair loads (:meth:`poll`)."""
        try:
            spec = self.asked(key, custom_target, custom_drafter, target_precision, drafter_precision, engine)
        except UserError:
            return gr.skip(), gr.Timer(active=False), gr.skip(), gr.skip()
        st = self.loader.state(spec)
        loading = st.busy
        chat = gr.update(value=st.pair.chat_template is not None) if st.status == Load.READY else gr.skip()
        # the timer's own tick leaves it running while the pair loads: a new Timer each second
        # made Gradio rebuild the component's config (a JSON schema) on the thread a compile shares
        timer = gr.skip() if polled and loading else gr.Timer(active=loading)
        line, picker = self.model_line(spec), gr.skip()
        back = loaded_choice(self.loader, self.presets, key) if st.status == Load.ERROR else None
        if back is not None:   # a failed load leaves the picker on the pair that is loaded, not on a second try
            picker = gr.update(value=back)
            line = tokens.message_html(f"{st.message} The picker is back on {self.presets[back].get('label', back)}, "
                                       "which is loaded.", level="error")
        return line, timer, chat, picker

    def poll(self, key: str, custom_target: str, custom_drafter: str, target_precision: Any = None,
             drafter_precision: Any = None, engine: Any = None):
        """The timer's tick: :meth:`tick`, the timer left running while the pair loads."""
        return self.tick(key, custom_target, custom_drafter, target_precision, drafter_precision, engine, polled=True)

    def status_line(self, key: str, custom_target: str, custom_drafter: str, target_precision: Any = None,
                    drafter_precision: Any = None, engine: Any = None):
        """``#model-status`` after a run, which may have loaded the pair: what it runs in."""
        try:
            return self.model_line(self.asked(key, custom_target, custom_drafter, target_precision,
                                              drafter_precision, engine))
        except UserError:
            return gr.skip()

    def ready_pair(self, spec: PairSpec, sess: runs.Session, mine: bool = True) -> Iterator[Frame]:
        """Wait for the pair, yielding its line (also in ``#model-status`` where it is the
        form's own, ``mine``); returns the pair."""
        while (st := self.loader.wait(spec, timeout=0.5)).busy:
            if sess.stop.is_set():  # the model keeps loading for the next run
                raise UserError("Stopped while the model loads.")
            line = self.model_line(spec)
            yield Frame(status=line, model_status=line if mine else None)
        if st.status != Load.READY:
            raise UserError(st.message)
        return st.pair

    def enter(self, spec: PairSpec, sess: runs.Session, s: RunSettings | None = None,
              beside: str | None = None) -> Iterator[Any]:
        """The one way into a run (Run, Measure, the profile, ``/generate``): wait for the pair
        (a load or compile holds no turn on the engine), with ``beside`` (an engine's name) for the
        same models on that engine too, then for the engine's turn, then compile the graphs ``s`` needs
        (none for ``s`` None), yielding frames. The last item is (pair, held ticket), or
        ((pair, the pair on ``beside``), ticket). A failure once the turn is taken leaves it first."""
        pair = yield from self.ready_pair(spec, sess)
        if beside is not None:
            pair = (pair, (yield from self.ready_pair(spec.on(beside), sess, mine=False)))
        ticket = yield from self.turn(sess)
        try:
            if s is not None:
                yield from self.compile_frames(pair[0] if beside is not None else pair, s, sess, spec)
        except BaseException:
            ticket.leave()
            raise
        yield pair, ticket

    def compile_frames(self, pair: Any, s: RunSettings, sess: runs.Session, spec: PairSpec) -> Iterator[Frame]:
        """A compiled pair's missing graphs for ``s``, compiled before the run's first token,
        with progress in ``#status`` and ``#model-status`` (no frame when none is missing);
        then the pair's line again (what compiling took, now)."""
        compiled = False
        for line in loading.compile_lines(pair, s, sess.stop):
            compiled = True
            yield Frame(status=line, model_status=line)
        if compiled:
            yield Frame(model_status=self.model_line(spec))

    def turn(self, sess: runs.Session) -> Iterator[Frame]:
        """Join the engine's line (the pair is ready by now), yielding a frame while waiting;
        returns the held :class:`mtp_viz.app.runtime.turns.Ticket`, which the caller leaves."""
        ticket = self.engine.join()
        try:
            while not ticket.wait(0.5):
                if sess.stop.is_set():
                    raise UserError("Stopped while waiting for the engine.")
                yield Frame(status=tokens.message_html(f"Waiting for the engine: {ahead_words(ticket.ahead, 'run')} "
                                                       "(one at a time, so timings never share the CPU)…"))
        except BaseException:  # Stop, or the visitor left: the place goes
            ticket.leave()
            raise
        return ticket


__all__ = ["CUSTOM", "Gate", "compiled_line", "loaded_choice", "model_status", "pair_name", "ran_in"]
