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

import dataclasses
import queue
import threading
import time
from typing import Any, Callable, Iterable, Iterator

from mtp_viz.engine.events import Error, Event
from mtp_viz.engine.schedules import ScheduleCache
from mtp_viz.sources.base import WARM_UP_TOKENS, Source
from mtp_viz.sources.settings import RunSettings
from mtp_viz.views import captions, charts, stats, theory, tokens
from mtp_viz.views.frame import PANE, Frame

from . import deploy, pairs, service, work
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


# seconds between status lines while a run's graphs compile (each frame is Gradio work beside the compile)
COMPILE_POLL = 1.0
COMPILE_TICK = 0.1   # seconds between looks for a graph that started (a line only when one did, or POLL passed)
WARM_FRAMES = 0.05   # seconds between the warm-up's frames (see warm_up)
# A first run as the page starts (#max-new 64, #draft-tokens 4, the constant schedule,
# both modes) on a short prompt: what a pair asked compiled compiles when it loads, and
# (shorter) the warm-up, so a first run with the page's settings finds every graph there.
FIRST_RUN = RunSettings("def main():\n    return", max_new_tokens=64, draft_tokens=4, chat=False)


def compile_lines(pair: Any, s: RunSettings, stop: threading.Event) -> Iterator[str]:
    """Compile, before a run's first token, every graph the runs of ``s`` can meet that
    ``pair`` (on the compiled engine) has not compiled yet
    (:func:`mtp_viz.sources.compiling.prepare`), on a thread of its own; yields a status
    line as each graph starts (every graph is named once, however fast it compiles: a warm
    compiler cache takes a fraction of a second) and every :data:`COMPILE_POLL` seconds
    meanwhile (nothing for an eager pair, or when every graph is there). Stop ends the wait
    in one sentence; the graphs go on compiling for the next run. A failure is one
    sentence (UserError)."""
    from mtp_viz.errors import UserError
    from mtp_viz.sources import compiling
    if not compiling.needed(pair, s):   # an eager pair needs none
        return
    heard: list[Any] = []   # each graph's progress, as the compile reaches it (list.append is atomic)
    failed: list[BaseException] = []
    done = threading.Event()

    def compile_all() -> None:
        try:
            with work.working():  # a compile cannot stop: the app's close waits for it (mtp_viz.app.runtime.work)
                compiling.prepare(pair, [s], progress=heard.append)
        except BaseException as e:  # noqa: BLE001 - told below, as one sentence
            failed.append(e)
        finally:
            done.set()

    def line(p: Any) -> str:
        return tokens.message_html("Compiling this run's graphs before its first token, "
                                   + (p.line() if p is not None else "waiting for the compiler (one compile at a time)")
                                   + f"… {time.monotonic() - t:.0f} s")
    threading.Thread(target=compile_all, daemon=True, name="mtp-viz-compile").start()
    t = last = time.monotonic()
    said = 0
    while not done.wait(COMPILE_TICK):
        if stop.is_set():
            raise UserError("Stopped while compiling; the graphs go on compiling for the next run.")
        if said < len(heard) or time.monotonic() - last >= COMPILE_POLL:
            news, said, last = heard[said:] or heard[-1:] or [None], len(heard), time.monotonic()
            for p in news:
                yield line(p)
    for p in heard[said:]:   # graphs that started and ended between two looks
        yield line(p)
    if failed:
        raise UserError(user_message(failed[0])) from failed[0]


def warm_up(source: Source, new_tokens: int = WARM_UP_TOKENS, top: int = 0) -> None:
    """An untimed comparison through the app's whole path: both modes in turns, top-k
    recording, panes, stats and every chart. The first call of each pays for lazy
    initialisation (torch's kernels, plotly's validators), which would otherwise land
    inside the first run a user times, on the same CPU."""
    s = dataclasses.replace(FIRST_RUN, max_new_tokens=new_tokens, top=top)
    # a frame every WARM_FRAMES s, not 0: at 0 the consumer never waits for the worker's
    # queue and spins, holding the interpreter's lock the engine's thread needs at every
    # torch op (a warm-up of 8 tokens took up to a minute on 2 cores)
    for _ in compare_frames(source, s, Session(), frame_interval=WARM_FRAMES, chart_interval=0):
        pass


def load_and_warm(target: str, drafter: str | None, precision: Any = None, engine: str | None = None,
                  progress: Callable[[Any], None] | None = None) -> Any:
    """The app's :class:`.service.PairLoader` work: set torch's threads on purpose, load
    the pair (each model in the precision the page asked, else ``MTP_VIZ_DTYPE`` if set,
    else the device's default; ``engine``: put on that engine of
    :data:`mtp_viz.engine.engines.ENGINES`, one that compiles with the graphs of
    :data:`FIRST_RUN` compiled now, ``progress`` told of each, ``pair.compile_seconds``, or
    eager with ``pair.compile_note`` saying why; None: the default), and warm it through
    the app's path (:func:`warm_up`)."""
    from mtp_viz.engine.engines import default_engine
    from mtp_viz.sources import models  # imports torch: only here, on first use
    models.set_threads(service.threads())
    pair = models.load_pair(target, drafter, dtype=deploy.env_dtype(),
                            target_precision=precision.target if precision else None,
                            drafter_precision=precision.drafter if precision else None)
    if engine not in (None, default_engine()):   # a pair loads on the default engine
        pair.use(engine, settings=[FIRST_RUN], progress=progress)
    return warm(pair)


def warm(pair: Any) -> Any:
    """``pair``, warmed through the app's path (:func:`warm_up`) so its first run is timed warm."""
    from mtp_viz.sources.local import LocalSource
    from mtp_viz.views import inspector
    warm_up(LocalSource(pair), top=inspector.TOP)
    return pair


def preloaded(pair: Any) -> Callable[..., Any]:
    """The app's loading work when it is given a pair already in memory (a notebook's,
    :func:`mtp_viz.launch`): that pair for its own name in the default precision on its
    own engine, warmed but not loaded again (:func:`mtp_viz.launch` set torch's threads as
    the app sets them); any other pair, these models in another precision, or asked on
    another engine, loads as usual."""
    key = pairs.pair_key(pair.name, pair.drafter_name)
    return lambda target, drafter, precision=None, engine=None, progress=None: warm(pair) \
        if pairs.pair_key(target, drafter) == key and precision is None and engine is None \
        else load_and_warm(target, drafter, precision, engine, progress)


def final_frame(sess: Session) -> Frame:
    """What a finished run shows besides its panes: every chart, the speedup and the
    measured-vs-theory panel (after a live run, a Race replay or a replayed trace)."""
    from mtp_viz.analysis.metrics import theory_check
    return Frame(figures=charts.all_figures(sess.spec, sess.ar),
                 compare=stats.compare_html(stats.run_stats(sess.spec), stats.run_stats(sess.ar),
                                            greedy=sess.greedy, faster=sess.faster),
                 theory=theory.theory_panel_html(theory_check(sess.spec, sess.ar or None)), last=True)


__all__ = ["Session", "StepGate", "Worker", "compare_frames", "compile_lines", "final_frame", "load_and_warm",
           "warm_up"]
