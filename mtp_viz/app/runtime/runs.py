"""One run in the app: its settings, the worker thread its source runs on, and the
frames a view renders from it (the off-screen Measure is in :mod:`.measure`).

Timing belongs to the source. The engine runs on a worker thread and hands its events
to the renderer through a queue, so the time a browser or the server spends rendering
and sending frames never enters the engine's clock. A comparison's two modes take
turns on that one thread, each on its own clock (:mod:`mtp_viz.sources.interleave`). Stop (or
the consumer going away: a closed tab ends the handler's generator) sets the run's stop
switch, which the engine checks after every step.
"""
from __future__ import annotations

import math
import queue
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Iterator

from mtp_viz.errors import UserError
from mtp_viz.engine.events import Error, Event
from mtp_viz.app.views import captions, charts, theory as panels, stats as stats_view, tokens as view
from . import service, zerogpu
from .service import FRAMES_PER_SECOND, user_message

FRAME_INTERVAL = 1 / FRAMES_PER_SECOND  # see service.FRAMES_PER_SECOND
CHART_INTERVAL = 2.0      # plotly figures are re-sent whole (and redrawn by the browser
                          # beside the run): rarely, so both modes stream under like load
HEARTBEAT = 1.0           # an empty frame after this long without news (see _stream)
STEP_IDLE = 300.0         # step mode stops a run left waiting for Next this long (seconds)
_END = object()


def whole(value: Any, name: str) -> int:
    """A whole number from a form field (Gradio sends floats), or one sentence."""
    try:
        f = float(value)
    except (TypeError, ValueError):
        raise UserError(f"{name} must be a number.") from None
    if not math.isfinite(f) or f != int(f):
        raise UserError(f"{name} must be a whole number.")
    return int(f)


def number(value: Any, name: str) -> float:
    """A finite number from a form field, or one sentence."""
    try:
        f = float(value)
    except (TypeError, ValueError):
        raise UserError(f"{name} must be a number.") from None
    if not math.isfinite(f):
        raise UserError(f"{name} must be a finite number.")
    return f


@dataclass(frozen=True)
class RunSettings:
    """Everything one comparison run needs, as the user chose it."""
    prompt: str
    target: str
    drafter: str | None = None
    drafter_kind: str = "auto"
    max_new_tokens: int = 64
    draft_tokens: int = 4
    schedule: str = "constant"
    temperature: float = 0.0      # 0 means greedy
    top_p: float = 1.0
    top_k: int = 0
    seed: int | None = None
    chat: bool = True
    baseline: bool = True
    max_prompt_tokens: int | None = None  # the deployment's cap (MTP_VIZ_MAX_PROMPT_TOKENS)
    top: int = 0                  # top candidates recorded per position (the token inspector's)

    @property
    def greedy(self) -> bool:
        return self.temperature == 0.0

    def engine_kwargs(self, mode: str, schedule: Any = None) -> dict[str, Any]:
        """Keyword arguments for ``ModelPair.generate``."""
        return dict(mode=mode, drafter=self.drafter_kind, max_new_tokens=self.max_new_tokens,
                    draft_tokens=self.draft_tokens, schedule=schedule or self.schedule,
                    temperature=self.temperature, top_p=self.top_p, top_k=self.top_k,
                    seed=self.seed, chat=self.chat, max_prompt_tokens=self.max_prompt_tokens, top=self.top)


def check_prompt(prompt: Any, cap_tokens: int) -> str:
    """The prompt text, or one sentence; a cheap length bound before any tokenizing (no
    tokenizer makes more tokens than characters plus a few specials)."""
    if not isinstance(prompt, str) or not prompt.strip():
        raise UserError("Type a prompt first, or pick one of the examples.")
    if len(prompt) > 16 * cap_tokens:
        raise UserError(f"The prompt is too long for this app (at most {cap_tokens} tokens).")
    return prompt


class StepGate:
    """Step mode: the engine's ``pause`` hook (see :func:`mtp_viz.engine.loop.speculative`).

    While ``on``, each call waits until Next (:meth:`advance`), Stop, step mode being
    switched off, or ``idle`` seconds without Next (then it stops the run: a paused run
    holds the model, and other visitors may be queued behind it). The engine takes the
    wait off its clock."""

    def __init__(self, stop: threading.Event, on: bool = False, idle: float = STEP_IDLE):
        self.stop, self.on, self.idle = stop, on, idle
        self.waiting = ""           # the phase a run waits after ("drafted", "verified"), or ""
        self.timed_out = False
        self._next = threading.Event()

    def __call__(self, phase: str) -> None:
        if not self.on:
            return
        self._next.clear()
        self.waiting, deadline = phase, time.monotonic() + self.idle
        try:
            while self.on and not self._next.wait(0.05) and not self.stop.is_set():
                if time.monotonic() > deadline:
                    self.timed_out = True
                    self.stop.set()
        finally:
            self.waiting = ""

    def advance(self) -> bool:
        """Next: release a waiting run; False when none waits (the press is ignored)."""
        if not self.waiting:
            return False
        self._next.set()
        return True


class Session:
    """Per-browser-session state (kept in ``gr.State``): the stop switch, step mode's
    gate, the recorded runs, and the schedules, which carry their state from one run
    to the next."""

    def __init__(self) -> None:
        self.stop = threading.Event()
        self.gate = StepGate(self.stop)
        self.spec: list[Event] = []
        self.ar: list[Event] = []
        self.greedy = True
        self.schedules: dict[tuple, Any] = {}

    def schedule(self, s: RunSettings, kind: str) -> Any:
        from mtp_viz.engine.schedules import SCHEDULES, make_schedule
        if s.schedule not in SCHEDULES:
            raise UserError(f"Unknown schedule {s.schedule!r}; choose one of {', '.join(SCHEDULES)}.")
        key = (s.schedule, kind, s.draft_tokens)
        if key not in self.schedules:
            self.schedules[key] = make_schedule(s.schedule, initial=s.draft_tokens)
        return self.schedules[key]

    def new_run(self, step_mode: bool = False) -> None:
        self.stop = threading.Event()
        self.gate = StepGate(self.stop, on=step_mode)
        self.spec, self.ar = [], []


class Worker:
    """Runs a source of events on its own thread; the consumer reads them from a queue.

    The queue is unbounded, so the source never waits for the consumer: its clock
    sees only its own work. ``close`` sets the stop switch and waits for the thread,
    which the engine honours after the step in progress."""

    def __init__(self, source: Callable[[], Iterable[Event]], stop: threading.Event):
        self.stop = stop
        self._queue: queue.SimpleQueue = queue.SimpleQueue()
        self._source = source
        self.finished = False  # set with the last batch
        self.thread = threading.Thread(target=self._run, daemon=True, name="mtp-viz-run")
        self.thread.start()

    def _run(self) -> None:
        try:
            for e in self._source():
                self._queue.put(e)
        except Exception as e:  # noqa: BLE001 - the app keeps serving
            self._queue.put(Error(message=user_message(e)))
        finally:
            self._queue.put(_END)

    def batches(self, every: float) -> Iterator[list[Event]]:
        """The events in batches, at most one every ``every`` seconds: all that arrived
        since the last, or an empty batch after ``every`` seconds without news (so a view
        can show pending drafts and notice a client that left). The consumer wakes on this
        clock, not for each event: a step brings a burst of events, and a consumer woken
        for each would take the interpreter's lock from the engine's thread as often, which
        slows the mode with more events per step (speculative) more."""
        last = time.monotonic()
        while True:
            try:
                first = self._queue.get(timeout=every)
            except queue.Empty:
                last = time.monotonic()
                yield []
                continue
            rest = every - (time.monotonic() - last)
            if rest > 0:
                time.sleep(rest)  # let the step's burst gather
            batch = [first]
            while True:
                try:
                    batch.append(self._queue.get_nowait())
                except queue.Empty:
                    break
            end = batch[-1] is _END
            self.finished = end
            last = time.monotonic()
            yield [e for e in batch if e is not _END]
            if end:
                return

    def close(self, timeout: float | None = 30.0) -> None:
        """Stop the source if it is still running (its consumer left), and wait for it."""
        if self.thread.is_alive():
            self.stop.set()
        self.thread.join(timeout)


def engine_runs(pair: Any, s: RunSettings, sess: Session) -> dict[str, dict[str, Any]]:
    """``pair.generate``'s keyword arguments for each pane of a comparison (the baseline
    only when asked for), with the session's schedule and its stop and step hooks."""
    kind = s.drafter_kind if s.drafter_kind != "auto" else ""
    out = {"spec": {"stop": sess.stop, "pause": sess.gate,
                    **s.engine_kwargs("speculative", sess.schedule(s, kind))}}
    if s.baseline:
        out["ar"] = {"stop": sess.stop, **s.engine_kwargs("autoregressive")}
    return out


def _stream(source: Callable[[], Iterable[tuple[str, Event]]], sess: Session, frame_interval: float,
            chart_interval: float) -> Iterator[dict[str, Any]]:
    """Consume one comparison from its worker (``(pane, event)`` items), recording into
    the session; yield a frame when news arrived and the last frame is
    ``frame_interval`` old, when a verification is slow enough for its pending drafts to
    be seen, and at the end. The worker's own Error (a source raised, which ends every
    run) is recorded with the speculative run."""
    outs = {"spec": sess.spec, "ar": sess.ar}
    panes = {k: view.PaneRenderer() for k in outs}
    stats = {k: stats_view.RunStats() for k in outs}
    worker = Worker(source, sess.stop)
    last_frame, last_chart = 0.0, time.monotonic()  # live charts once a run is chart_interval old
    dirty: set[str] = set()  # panes with events since the last frame
    chart_news = False       # speculative events since the last live charts (they chart only it)
    errors: list[Error] = []   # not shown yet
    try:
        for batch in worker.batches(frame_interval):
            for item in batch:
                key, e = item if isinstance(item, tuple) else ("spec", item)
                outs[key].append(e)
                panes[key].add(e)
                stats[key].add(e)
                dirty.add(key)
                errors += [e] if isinstance(e, Error) else []
            final = worker.finished
            now = time.monotonic()
            if not final and not dirty and now - last_frame >= HEARTBEAT:
                # Nothing new (a slow step, or a paused source): an empty frame changes
                # nothing on the page, but lets the server notice a client that left and
                # close this generator, which stops the worker.
                last_frame = now
                yield {}
                continue
            if not final and (not dirty or now - last_frame < frame_interval):
                continue
            last_frame = now
            frame: dict[str, Any] = {}
            chart_news |= "spec" in dirty
            for key in sorted(dirty):
                frame[key], frame[key + "_stats"] = panes[key].html(), stats_view.stats_html(stats[key])
            dirty = set()
            if sess.gate.on:
                frame["caption"] = captions.caption_html(sess.spec)
            if errors:
                frame["status"] = view.message_html(errors[-1].message, level="error")
                errors = []
            # live charts plot only the speculative run: redrawn only with news of it
            if final or (chart_news and now - last_chart >= chart_interval):
                last_chart, chart_news = now, False
                frame["figures"] = charts.live_figures(sess.spec)
            yield frame
    finally:
        worker.close()


def compare_frames(pair: Any, s: RunSettings, sess: Session, *, frame_interval: float = FRAME_INTERVAL,
                   chart_interval: float = CHART_INTERVAL, threads: int = 0,
                   source: Callable = zerogpu.runs) -> Iterator[dict[str, Any]]:
    """The speculative run and (when asked for) the autoregressive baseline, then every
    chart, the speedup and the identity check. ``source(pair, prompt, kwargs by pane)``
    yields ``(pane, event)``: for the local engine the two modes take turns on one
    worker thread, each on its own clock (:mod:`mtp_viz.sources.interleave`), so both meet the
    machine in the same state. Yields frames: dicts from display slot to HTML or
    figures; absent slots are unchanged."""
    sess.greedy = s.greedy
    both = ("Speculative decoding and the autoregressive baseline take turns, token for token, "
            "each on its own clock…")
    yield {"status": view.message_html(both if s.baseline else "Speculative decoding: drafting and verifying…")}
    kwargs = engine_runs(pair, s, sess)
    yield from _stream(lambda: source(pair, s.prompt, kwargs), sess, frame_interval, chart_interval)
    final = final_frame(sess, threads)
    if not any(isinstance(e, Error) for e in sess.spec + sess.ar):
        stopped = sess.stop.is_set()
        final["status"] = view.message_html(
            f"Stopped: step mode waited {sess.gate.idle / 60:g} minutes for Next." if sess.gate.timed_out else
            "Stopped." if stopped else
            "Done. Press Race replay to watch both runs side by side on their recorded timings, "
            "or Measure for the median of repeated runs.",
            level="warn" if stopped else "info")
    yield final


def warm_up(pair: Any, tokens: int = 8, top: int = 0) -> None:
    """An untimed comparison through the app's whole path: both modes in turns, top-k
    recording, panes, stats and every chart. The first call of each pays for lazy
    initialisation (torch's kernels, plotly's validators), which would otherwise land
    inside the first run a user times, on the same CPU."""
    s = RunSettings(prompt="def main():\n    return", target="", max_new_tokens=tokens, chat=False, top=top)
    for _ in compare_frames(pair, s, Session(), frame_interval=0, chart_interval=0):
        pass


def load_and_warm(target: str, drafter: str | None) -> Any:
    """The app's :class:`.service.PairLoader` work: set torch's threads on purpose, load
    the pair, and warm it through the app's path (:func:`warm_up`)."""
    from mtp_viz.sources import models  # imports torch: only here, on first use
    from mtp_viz.app.views import inspector
    models.set_threads(service.threads())
    pair = models.load_pair(target, drafter)
    warm_up(pair, top=inspector.TOP)
    return pair


def final_frame(sess: Session, threads: int = 0) -> dict[str, Any]:
    """What a finished run shows besides its panes: every chart, the speedup and the
    measured-vs-theory panel (after a live run, a Race replay or a replayed trace)."""
    from mtp_viz.analysis.metrics import theory_check
    return {"figures": charts.all_figures(sess.spec, sess.ar),
            "compare": stats_view.compare_html(stats_view.run_stats(sess.spec), stats_view.run_stats(sess.ar),
                                         greedy=sess.greedy, threads=threads),
            "theory": panels.theory_panel_html(theory_check(sess.spec, sess.ar or None))}


__all__ = ["RunSettings", "Session", "StepGate", "Worker", "compare_frames", "final_frame", "load_and_warm", "warm_up",
           "check_prompt", "whole", "number"]
