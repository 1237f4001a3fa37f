"""A recorded trace as a source: its runs, as they were recorded (no model).

The events keep their recorded times; a view that replays them at that pace (Race
replay, ``mtp-viz replay``) slices the stream with :mod:`mtp_viz.analysis.stream`.
"""
from __future__ import annotations

import threading
from pathlib import Path
from typing import Iterator, Sequence

from mtp_viz.engine.events import Event

from . import trace
from .base import Pause, Source
from .settings import RunSettings


class TraceSource(Source):
    name = "a recorded trace"

    def __init__(self, events: Sequence[Event]):
        self.recorded = {r[0].mode: r for r in trace.split_runs(events)}  # mode -> its run

    @classmethod
    def read(cls, path: str | Path) -> "TraceSource":
        """A trace file; a malformed one is one sentence (:func:`.trace.read`)."""
        return cls(trace.read(path))

    @property
    def modes(self) -> tuple[str, ...]:
        return tuple(self.recorded)

    def runs(self, s: RunSettings | None = None, stop: threading.Event | None = None,
             pause: Pause | None = None) -> Iterator[tuple[str, Event]]:
        """The recorded runs of ``s.modes`` (every recorded run without ``s``), one after
        the other; the settings themselves are the trace's own."""
        for mode in (s.modes if s else self.modes):
            for e in self.recorded.get(mode, ()):
                if stop is not None and stop.is_set():
                    return
                yield mode, e


__all__ = ["TraceSource"]
