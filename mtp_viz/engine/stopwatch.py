"""A run's engine clock, with what is not the engine's work kept off it.

Two things happen during a run that are not decoding: a step-mode wait for the user
(:meth:`Stopwatch.held`) and compiling a graph the first time a shape is seen (the
decoder measures those seconds inside its call and reports them: :meth:`Stopwatch.compiled`).
Both are subtracted once, here, so every reading (a lap, the run's elapsed time) counts
only the work, and the loop makes no corrections of its own.

A compile is timed in wall seconds, while the run's clock may read the engine thread's
CPU time (:func:`mtp_viz.sources.interleave.own_clock`): a compile's C++ compilers run in
other processes, so its wall seconds can exceed what this thread's clock ran during the
call. A lap never gives back more than it ran, so no reading goes below zero.
"""
from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass
from typing import Callable, Iterator


@dataclass
class Lap:
    seconds: float = 0.0   # the lap's time on the engine's clock, once it ended


class Stopwatch:
    """Reads ``clock`` (seconds) from now on, minus what was kept off it."""

    def __init__(self, clock: Callable[[], float]):
        self.clock = clock
        self._start = clock()
        self._off = 0.0
        self._lap_at: float | None = None   # the clock's reading when the current lap began
        self.compile_seconds = 0.0   # graphs compiled during the run (compiled engine), wall seconds

    def elapsed(self) -> float:
        """Seconds of work since the watch started."""
        return self.clock() - self._start - self._off

    @contextmanager
    def held(self) -> Iterator[None]:
        """A wait that is not the engine's work (step mode's pause)."""
        t = self.clock()
        try:
            yield
        finally:
            self._off += self.clock() - t

    def compiled(self, seconds: float) -> None:
        """``seconds`` (wall) of compiling that a call inside the current lap spent: off
        the clock, but never more than the lap has run on it."""
        ran = self.clock() - self._lap_at if self._lap_at is not None else seconds
        self._off += min(seconds, max(ran, 0.0))
        self.compile_seconds += seconds

    @contextmanager
    def lap(self) -> Iterator[Lap]:
        """Times the block on the engine's clock (what was kept off it excluded)."""
        lap, start = Lap(), self.elapsed()
        self._lap_at = self.clock()
        try:
            yield lap
        finally:
            lap.seconds = self.elapsed() - start
            self._lap_at = None


__all__ = ["Lap", "Stopwatch"]
