"""What the app needs from the models, without importing torch until a pair loads.

Pairs are loaded once per process and shared by every session, in a bounded cache
(``MTP_VIZ_MAX_PAIRS``, least recently used first out) keyed by the models as they
resolve on disk, so ``tiny``, its folder and ``./its/folder/`` are one pair, and by the
precision asked of each (the same models in int8 are another pair), and by the engine
asked (compiled, or eager: the same models compiled are another pair). Loads
run on background threads, at most ``LOAD_SLOTS`` at a time and one per pair (and one
model build at a time in the process: :mod:`mtp_viz.engine.build`); a lookup never waits
for a load. A pair asked compiled waits in the compiler's line first: one compile at a
time app-wide, at most ``MTP_VIZ_COMPILE_QUEUE`` waiting, each with its place shown.
``MTP_VIZ_ALLOWED_MODELS`` limits what a public deployment may load at all, and with it
which precisions (``MTP_VIZ_PRECISIONS``) and whether the compiled engine
(``MTP_VIZ_COMPILE``) are offered.
"""
from __future__ import annotations

import os
import sys
import threading
import time
from collections import OrderedDict
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass
from enum import Enum
from typing import Any, Callable, Iterator

from mtp_viz.errors import UserError

from .deploy import AllowList, env_int
from .pairs import PairSpec
from .turns import Turns
from .work import working

LOAD_SLOTS = 2  # loads running at once; more wait their turn (each is memory-hungry)
def user_message(exc: BaseException) -> str:
    """One sentence for an exception: a UserError's own, else a generic sentence that
    names only the exception's type (its text may hold paths or file contents)."""
    if isinstance(exc, UserError):
        return str(exc).strip().splitlines()[0] if str(exc).strip() else "That request cannot be run."
    return f"Something went wrong ({type(exc).__name__}); the app is still running."


class Load(str, Enum):
    """Where a pair stands in the loader (a str, so it also reads as its plain name)."""
    IDLE = "idle"            # never asked for, or forgotten
    QUEUED = "queued"        # waiting for a load slot
    LOADING = "loading"
    READY = "ready"
    ERROR = "error"          # failed; ``message`` says why in one sentence
    UNLOADED = "unloaded"    # evicted to make room; loads again on its next run


@dataclass
class LoadState:
    status: Load = Load.IDLE
    message: str = ""
    started: float = 0.0
    pair: Any = None
    ticket: Any = None     # a compile's place in the compiler's line (turns.Ticket), while queued
    progress: Any = None   # while compiling: the graph being compiled (engine.graphs.Progress)

    @property
    def ahead(self) -> int:
        """Compiles before this one in the compiler's line (0 once it runs, and for a load)."""
        return self.ticket.ahead if self.ticket is not None and self.status == Load.QUEUED else 0

    @property
    def busy(self) -> bool:
        """Queued or loading: a run must wait."""
        return self.status in (Load.QUEUED, Load.LOADING)

    @property
    def ended(self) -> bool:
        """Failed or unloaded: only a sentence is left."""
        return self.status in (Load.ERROR, Load.UNLOADED)


def threads() -> int:
    """torch threads for every run in the app: :func:`mtp_viz.sources.models.default_threads`
    (``MTP_VIZ_THREADS``; by default one core is left to the web server, which renders
    frames while the engine computes)."""
    from mtp_viz.sources.models import default_threads
    return default_threads()


MAX_ENDED = 32  # failed or unloaded pairs whose sentence the loader remembers


class PairLoader:
    """The process's pairs: a bounded, thread-safe cache with background loading, each
    asked as a :class:`.pairs.PairSpec` and kept under its ``key``.

    ``load(target, drafter)`` does the work, ``load(target, drafter, precision=...)`` for a
    pair asked in other precisions than the default, ``engine=...`` for one asked on another
    engine than the default, with ``progress`` where that engine compiles, which hears of
    each graph it compiles (each keyword passed only when asked: :meth:`.pairs.PairSpec.load_keywords`): the app's is
    :func:`.loading.load_and_warm` (load, then an untimed comparison through the app's path,
    so the first run is timed warm); tests pass their own."""

    def __init__(self, load: Callable[[str, str | None], Any],
                 allow: AllowList | None = None, max_pairs: int | None = None):
        self._load = load
        self.allow = allow or AllowList()
        self.max_pairs = max_pairs or env_int("MTP_VIZ_MAX_PAIRS", 2)
        self._lock = threading.Lock()
        self._slots = threading.Semaphore(LOAD_SLOTS)
        self._states: OrderedDict[tuple, LoadState] = OrderedDict()
        self._done: dict[tuple, threading.Event] = {}
        waiting = env_int("MTP_VIZ_COMPILE_QUEUE", 2, minimum=0)
        self.compiles = Turns(1, waiting, f"{waiting + 1} compiles are already running or waiting; "
                                          "try again when one has finished, or run the eager engine.")

    def state(self, spec: PairSpec) -> LoadState:
        with self._lock:
            st = self._states.get(spec.key)
            if st is not None and st.status == Load.READY:
                self._states.move_to_end(spec.key)  # recently used
            return st or LoadState()

    def start(self, spec: PairSpec) -> LoadState:
        """Begin loading in the background unless it is queued, loading or loaded."""
        from mtp_viz.engine.engines import ENGINES
        self.allow.check(spec.target, spec.drafter)
        self.allow.check_build(spec.precision, spec.engine)
        key = spec.key
        with self._lock:
            st = self._states.get(key)
            if st and (st.busy or st.status == Load.READY):
                return st
            ticket = self.compiles.join() if ENGINES[spec.engine].compiles else None   # full: one sentence
            st = self._states[key] = LoadState(Load.QUEUED, "", time.monotonic(), ticket=ticket)
            self._done[key] = threading.Event()
        threading.Thread(target=self._work_until_done, args=(spec,), daemon=True, name="mtp-viz-load").start()
        return st

    def put(self, spec: PairSpec, pair: Any) -> LoadState:
        """``pair``, already loaded (and warmed), ready at once as ``spec``: no load, no
        thread (:func:`mtp_viz.launch`'s pair, asked by its name in the default precisions
        on the default engine)."""
        with self._lock:
            st = self._states[spec.key] = LoadState(Load.READY, "", time.monotonic(), pair)
            self._states.move_to_end(spec.key)
            self._done.setdefault(spec.key, threading.Event()).set()
        return st

    def _work_until_done(self, *args: Any) -> None:
        with working():  # a load cannot stop: the app's close and the process's exit wait for it
            self._work(*args)

    def _work(self, spec: PairSpec) -> None:
        from mtp_viz.engine.engines import ENGINES
        key, asked = spec.key, spec.load_keywords()
        if ENGINES[spec.engine].compiles:
            asked["progress"] = self._reporter(key)
        ticket = self._states[key].ticket
        try:
            if ticket is not None:
                ticket.wait()                # the compiler's turn (one compile at a time)
                yield_cpu()
            with self._slots, (short_switches() if ticket is not None else nullcontext()):
                with self._lock:
                    self._states[key].status = Load.LOADING
                try:
                    pair = self._load(spec.target, spec.drafter, **asked)
                    new = LoadState(Load.READY, "", self._states[key].started, pair)
                except BaseException as e:  # noqa: BLE001 - shown to the user as one sentence
                    new = LoadState(Load.ERROR, user_message(e), self._states[key].started)
        finally:
            if ticket is not None:
                ticket.leave()
        with self._lock:
            self._states[key] = new
            self._states.move_to_end(key)
            self._evict()
            self._done[key].set()

    def _reporter(self, key: tuple) -> Callable[[Any], None]:
        """What a compiling load tells of each graph: kept in its state for the status line."""
        def report(progress: Any) -> None:
            with self._lock:
                st = self._states.get(key)
                if st is not None and st.busy:
                    st.progress = progress
        return report

    def _evict(self) -> None:
        """Unload least recently used pairs beyond ``max_pairs`` (a run still using one
        keeps it alive until it ends)."""
        ready = [k for k, s in self._states.items() if s.status == Load.READY]
        for key in ready[:max(0, len(ready) - self.max_pairs)]:
            self._states[key] = LoadState(Load.UNLOADED, "This pair was unloaded to make room for "
                                          "another; it loads again when you run it.")
        # Failed and unloaded entries hold only a sentence, but every distinct bad name a
        # visitor sends would add one: keep the newest few (the one just finished is last).
        ended = [k for k, s in self._states.items() if s.ended]
        for key in ended[:max(0, len(ended) - MAX_ENDED)]:
            del self._states[key]
            self._done.pop(key, None)

    def wait(self, spec: PairSpec, timeout: float | None = None) -> LoadState:
        """:meth:`start`, then its state once loaded (or failed), or after ``timeout`` seconds."""
        self.start(spec)
        with self._lock:
            done = self._done[spec.key]
        done.wait(timeout)
        return self.state(spec)

    def loaded(self) -> list[tuple]:
        with self._lock:
            return [k for k, s in self._states.items() if s.status == Load.READY]


COMPILE_NICENESS = 15   # a compiling thread's (and its compiler processes') niceness


COMPILE_SWITCH = 0.0002  # seconds: the interpreter's switch interval while a compile runs


def yield_cpu() -> None:
    """Lower this thread's CPU priority (Linux: a thread is a task with its own niceness,
    and the C++ compilers inductor starts from it inherit it), so a compile (minutes of
    tracing and C++ on the same cores) takes the CPU only when runs leave it idle. The
    loader runs each load on a thread of its own, so nothing else inherits the niceness."""
    try:
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), COMPILE_NICENESS)
    except (AttributeError, OSError):  # not Linux, or not allowed: compile at normal priority
        pass


@contextmanager
def short_switches() -> Iterator[None]:
    """While a compile traces (pure Python, minutes), a run's thread gives up the
    interpreter's lock at every torch op and waits up to one switch interval (5 ms by
    default) to get it back: a forward of a thousand ops took seconds. A shorter interval
    bounds that wait; compiles run one at a time, so saving and restoring it is safe."""
    before = sys.getswitchinterval()
    sys.setswitchinterval(COMPILE_SWITCH)
    try:
        yield
    finally:
        sys.setswitchinterval(before)


__all__ = ["COMPILE_NICENESS", "LOAD_SLOTS", "Load", "LoadState", "MAX_ENDED", "PairLoader",
           "short_switches", "threads", "user_message", "yield_cpu"]
