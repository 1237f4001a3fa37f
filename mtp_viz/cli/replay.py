"""`mtp-viz replay trace.jsonl`: play a recorded trace in the terminal at its recorded timing.

Each run of the trace (speculative, then the baseline when it ran) plays from its own
start: a speculative step's tokens appear at the step's ``t``, an autoregressive token
at its own ``t`` (:func:`mtp_viz.analysis.stream.events_until`, the app's Race replay rule),
styled as ``mtp-viz generate`` styles them, then the run's summary line.
"""
from __future__ import annotations

import argparse
import itertools
import math
import os
import sys
import time
from typing import Callable, Iterator, Sequence

from mtp_viz.analysis.stream import events_until
from mtp_viz.analysis.terminal import print_styled
from mtp_viz.engine.events import Event
from mtp_viz.errors import UserError
from mtp_viz.sources.recorded import TraceSource

POLL = 0.02  # seconds between looks at the clock: finer than a terminal needs


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("trace", help="a trace file (JSON lines, as `mtp-viz generate --jsonl` prints)")
    p.add_argument("--speed", type=float, default=1.0, help="playback speed (default 1: recorded timing)")
    p.add_argument("--color", choices=["auto", "always", "never"], default="auto")


def played(run: Sequence[Event], speed: float, clock: Callable[[], float] = time.monotonic,
           sleep: Callable[[float], None] = time.sleep) -> Iterator[Event]:
    """The run's events, each yielded once it is visible at ``speed`` × the elapsed time."""
    t0, shown = clock(), 0
    while True:
        visible, done = events_until(run, (clock() - t0) * speed)
        yield from visible[shown:]
        shown = len(visible)
        if done:
            return
        sleep(POLL)


def run(args: argparse.Namespace) -> int:
    if not (math.isfinite(args.speed) and args.speed > 0):
        raise UserError("--speed must be a positive number.")
    source = TraceSource.read(args.trace)
    color = args.color == "always" or (args.color == "auto" and sys.stdout.isatty()
                                       and not os.environ.get("NO_COLOR"))
    for i, (mode, items) in enumerate(itertools.groupby(source.runs(), key=lambda item: item[0])):
        print(("\n" if i else "") + f"[{mode}]", flush=True)
        print_styled(played([e for _, e in items], args.speed), color)
    return 0
