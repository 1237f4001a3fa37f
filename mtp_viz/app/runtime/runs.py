"""One run in the app: the worker thread its source runs on, the session it is recorded
into, and the frames a view renders from it (the off-screen Measure is in :mod:`mtp_viz.measure`).

Timing belongs to the source. The source runs on a worker thread and hands its events
to the renderer through a queue, so the time a browser or the server spends rendering
and sending frames never enters the source's clock (the local engine's modes take
turns on that one thread, each on its own clock: :mod:`mtp_viz.sources.local`). Stop (or
the consumer going away: a closed tab ends the handler's generator) sets the run's stop
switch, which the engine checks after every step.
"""
from __future__ import annotations

import queue
import threading
import time
from typing import Any, Callable, Iterable, Iterator

from mtp_viz.engine.events import Error, Event
from mtp_viz.engine.schedules import ScheduleCache
from mtp_viz.sources.base import Source
from mtp_viz.sources.settings import RunSettings
from mtp_viz.views import captions, charts, stats, theory, tokens
from mtp_viz.views.frame import PANE, Frame

from . import work
from .deploy import FRAMES_PER_SECOND
from .service import user_message

FRAME_INTERVAL = 1 / FRAMES_PER_SECOND  # see deploy.FRAMES_PER_SECOND
CHART_INTERVAL = 2.0      # plotly figures are re-sent whole (and redrawn by the browser
                          # beside the run): rarely, so both modes stream under like load
HEARTBEAT = 1.0           # an empty frame after this long without news (see _stream)
STEP_IDLE = 300.0         # step mode stops a run left waiting for Next this long (seconds)
_END = object()


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
        self.schedules = ScheduleCache()
        # the plain decoders of each pair (target, drafter, precision) a Measure timed
        # beside it in this session, by name (the newest reading of each), and those of
        # the run shown: its speedup names the fastest that beats its own plain decoding
        self.measured: dict[tuple, dict[str, Any]] = {}
        self.faster: tuple = ()

    def new_run(self, step_mode: bool = False) -> None:
        self.stop = threading.Event()
        self.gate = StepGate(self.stop, on=step_mode)
        self.spec, self.ar = [], []
        self.faster = ()

    def remember(self, pair: tuple, decoders) -> None:
        """A Measure's decoders beside ``pair`` (target, drafter, precision), kept for its runs."""
        self.measured.setdefault(pair, {}).update({d.name: d for d in decoders})

    def beside(self, pair: tuple) -> tuple:
        """The decoders a Measure timed beside ``pair`` in this session."""
        return tuple(self.measured.get(pair, {}).values())


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
            with work.working(self.stop):  # the app's close and the process's exit stop it first
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
            try:  # every=0 (warm_up's): each event as it comes; a zero timeout would spin against the engine
                first = self._queue.get(timeout=every if every > 0 else None)
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


def _stream(source: Callable[[], Iterable[tuple[str, Event]]], sess: Session, frame_interval: float,
            chart_interval: float) -> Iterator[Frame]:
    """Consume one comparison from its worker (``(pane, event)`` items), recording into
    the session; yield a frame when news arrived and the last frame is
    ``frame_interval`` old, when a verification is slow enough for its pending drafts to
    be seen, and at the end. The worker's own Error (a source raised, which ends every
    run) is recorded with the speculative run."""
    outs = {"spec": sess.spec, "ar": sess.ar}
    panes = {k: tokens.PaneRenderer() for k in outs}
    tallies = {k: stats.RunStats() for k in outs}
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
                tallies[key].add(e)
                dirty.add(key)
                errors += [e] if isinstance(e, Error) else []
            final = worker.finished
            now = time.monotonic()
            if not final and not dirty and now - last_frame >= HEARTBEAT:
                # Nothing new (a slow step, or a paused source): an empty frame changes
                # nothing on the page, but lets the server notice a client that left and
                # close this generator, which stops the worker.
                last_frame = now
                yield Frame()
                continue
            if not final and (not dirty or now - last_frame < frame_interval):
                continue
            last_frame = now
            parts: dict[str, Any] = {}
            chart_news |= "spec" in dirty
            for key in sorted(dirty):
                parts[key], parts[key + "_stats"] = panes[key].html(), stats.stats_html(tallies[key])
            dirty = set()
            if sess.gate.on:
                parts["caption"] = captions.caption_html(sess.spec)
            if errors:
                parts["status"] = tokens.message_html(errors[-1].message, level="error")
                errors = []
            # live charts plot only the speculative run: redrawn only with news of it
            if final or (chart_news and now - last_chart >= chart_interval):
                last_chart, chart_news = now, False
                parts["figures"] = charts.live_figures(sess.spec)
            yield Frame(**parts)
    finally:
        worker.close()


def compare_frames(source: Source, s: RunSettings, sess: Session, *, frame_interval: float = FRAME_INTERVAL,
                   chart_interval: float = CHART_INTERVAL) -> Iterator[Frame]:
    """The runs ``s.modes`` asks of ``source`` (the speculative run, and the
    autoregressive baseline when asked for), then every chart, the speedup and the
    identity check. How the runs share the machine and their clocks is the source's
    business (:mod:`mtp_viz.sources.base`); the worker thread keeps rendering off them.
    The last frame (``last``) holds every chart, the speedup, the theory panel and the
    closing status line."""
    sess.greedy = s.greedy
    both = ("Speculative decoding and the autoregressive baseline take turns, token for token, "
            "each on its own clock…")
    yield Frame(status=tokens.message_html(both if s.baseline else "Speculative decoding: drafting and verifying…"))
    pause = sess.gate if source.capabilities.pausable else None
    yield from _stream(lambda: ((PANE[m], e) for m, e in source.runs(s, sess.stop, pause)), sess,
                       frame_interval, chart_interval)
    final = final_frame(sess)
    if any(isinstance(e, Error) for e in sess.spec + sess.ar):
        yield final
        return
    stopped = sess.stop.is_set()
    yield final | Frame(status=tokens.message_html(
        f"Stopped: step mode waited {sess.gate.idle / 60:g} minutes for Next." if sess.gate.timed_out else
        "Stopped." if stopped else
        "Done. Press Race replay to watch both runs side by side on their recorded timings, "
        "or Measure for the median of repeated runs.",
        level="warn" if stopped else "info"))



def final_frame(sess: Session) -> Frame:
    """What a finished run shows besides its panes: every chart, the speedup and the
    measured-vs-theory panel (after a live run, a Race replay or a replayed trace)."""
    from mtp_viz.analysis.metrics import theory_check
    return Frame(figures=charts.all_figures(sess.spec, sess.ar),
                 compare=stats.compare_html(stats.run_stats(sess.spec), stats.run_stats(sess.ar),
                                            greedy=sess.greedy, faster=sess.faster),
                 theory=theory.theory_panel_html(theory_check(sess.spec, sess.ar or None)), last=True)


__all__ = ["Session", "StepGate", "Worker", "compare_frames", "final_frame"]
