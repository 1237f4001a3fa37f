"""Several sources on one thread, taking turns, each timed by a clock of its own.

Timing two decoding modes one after the other on a shared machine compares two
machines: whatever else runs during the first second slows one mode and not the other.
Here the sources take turns on the calling thread, and each is timed by a clock that
runs only while that source runs, so no source is charged for another's work.

The source that has produced the smallest share of its token budget
(``Start.settings["max_new_tokens"]``) goes next, so the turns are about one step
long and both modes work through their outputs together, to the end: whatever the
machine does meanwhile meets both. Turns by own time instead (the one whose clock is
behind goes next, a live race) let the faster mode finish first, and whatever slowed
the machine after that slowed the other alone. The race itself is Race replay, on the
recorded clocks. How much each rule scatters the app's speedup is measured in
``benchmarks/results/app/app_speedup.md``.

What "own time" means is the caller's choice (``now``, named by ``basis``; the local
source's is :func:`own_clock`). The worker thread's CPU clock, where the engine computes
on that thread alone, leaves out the time a run waits for a core (the browser drawing
beside it) or for the interpreter lock (the server rendering frames in the same
process): a run waits for the lock around its forward passes, and plain decoding makes
several times as many per token, so wall time biases the speedup
(``benchmarks/own_clock.py``, ``benchmarks/results/app/own_clock.md``).

A step-mode pause blocks the thread, so neither source moves while one waits for Next.
"""
from __future__ import annotations

import time
from typing import Callable, Iterable, Iterator

from mtp_viz.engine.events import Event, Start


class OwnClock:
    """Seconds this source has run: ``now`` (``time.perf_counter``) advancing only
    between :meth:`resume` and :meth:`suspend`. ``basis`` names what ``now`` reads
    ("wall" or "cpu": the thread's CPU time); the engine records it in ``Start.settings``."""

    def __init__(self, now: Callable[[], float] = time.perf_counter, basis: str = "wall") -> None:
        self.now, self.basis, self.spent = now, basis, 0.0
        self._since: float | None = None

    def __call__(self) -> float:
        running = self.now() - self._since if self._since is not None else 0.0
        return self.spent + running

    def resume(self) -> None:
        self._since = self.now()

    def suspend(self) -> None:
        if self._since is not None:
            self.spent += self.now() - self._since
            self._since = None


TOKENS = ("accepted", "bonus", "token")  # the event types that add a token to the output


class Share:
    """The share of its token budget a source has produced (0 until it says its budget)."""

    def __init__(self) -> None:
        self.tokens, self.budget = 0, 0

    def add(self, e: Event) -> float:
        if isinstance(e, Start):
            self.budget = int(e.settings.get("max_new_tokens") or 0)
        elif e.type in TOKENS:
            self.tokens += 1
        return self.tokens / self.budget if self.budget else 0.0


def own_clock(device: str) -> tuple[Callable[[], float], str]:
    """The clock a local run is charged by, and its basis' name. On a CPU with one torch
    thread every operation runs on the generating thread, so that thread's CPU time is
    the run's whole work (equal to wall time, to the millisecond, on an idle machine) and
    leaves out time spent waiting for a core or for the interpreter lock. Anywhere else
    (a GPU, torch's thread pool) work happens off the thread: wall time."""
    import torch
    if device == "cpu" and torch.get_num_threads() == 1:
        return time.thread_time, "cpu"
    return time.perf_counter, "wall"


def running_clock(device: str) -> OwnClock:
    """A clock for one run on its own (a timed bench run, Measure's): :func:`own_clock`,
    already running, so it reads what a run in turns would have been charged."""
    now, basis = own_clock(device)
    clock = OwnClock(now, basis)
    clock.resume()
    return clock


def interleave(sources: dict[str, Callable[[Callable[[], float]], Iterable[Event]]],
               now: Callable[[], float] = time.perf_counter,
               basis: str = "wall") -> Iterator[tuple[str, Event]]:
    """Run ``sources`` (name -> a function that takes a clock and returns the source's
    events) in turns on this thread, the one with the smallest share of its token budget
    next; yields (name, event) in the order they happen. Ties go to the first-named source.
    An exception in any source ends all of them.
    ``now`` is the time every clock reads, ``basis`` its name (tests pass a counter)."""
    clocks = {name: OwnClock(now, basis) for name in sources}
    running: dict[str, Iterator[Event]] = {}
    for name, make in sources.items():
        clocks[name].resume()
        try:
            running[name] = iter(make(clocks[name]))
        finally:
            clocks[name].suspend()
    shares = {name: Share() for name in sources}
    ahead = dict.fromkeys(sources, 0.0)
    while running:
        name = min(running, key=ahead.__getitem__)
        clocks[name].resume()
        try:
            e = next(running[name])
        except StopIteration:
            del running[name]
            continue
        finally:
            clocks[name].suspend()
        ahead[name] = shares[name].add(e)
        yield name, e


__all__ = ["OwnClock", "Share", "interleave", "own_clock", "running_clock"]
