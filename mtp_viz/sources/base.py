"""The Source protocol: a run's settings in, an event stream out.

Every front end (the app's comparison, the CLI, ``/generate``, notebooks) takes a
:class:`Source` and consumes what :meth:`Source.runs` yields; none of them asks which
kind it has. A source decides how its runs share the machine and what clock times
them: the local engine interleaves its modes on one thread, each on its own clock
(:mod:`.interleave`); a vLLM server's runs go one after the other, timed by the arrival
of their own streams; a recorded trace replays the times it recorded.

To add a source, subclass :class:`Source` in a module of this package and give
:func:`mtp_viz.sources.open_source` a way to build it (compare transformers'
``CandidateGenerator`` and its factory).
"""
from __future__ import annotations

import threading
from abc import ABC, abstractmethod
from typing import Callable, Iterator

from mtp_viz.engine.events import Event

from .settings import RunSettings

# step mode's hook: called after a draft ("drafted") and a verification ("verified"),
# returns when the user wants the next phase (see mtp_viz.engine.loop.speculative)
Pause = Callable[[str], None]


class Source(ABC):
    """Where runs come from. ``name`` is how status lines speak of it."""
    name: str = "a source"
    #: whether step mode can pause this source between a draft and its verification
    pausable: bool = False

    @abstractmethod
    def runs(self, s: RunSettings, stop: threading.Event | None = None,
             pause: Pause | None = None) -> Iterator[tuple[str, Event]]:
        """``(mode, event)`` of the runs ``s.modes`` asks for, in the order they happen.

        ``stop`` set ends every run after its current step; ``pause`` (step mode) is
        honoured where :attr:`pausable`. Bad settings raise a one-sentence UserError
        before any event; a failure during a run ends its stream with an ``error``
        event or a UserError."""

    def events(self, s: RunSettings, stop: threading.Event | None = None) -> Iterator[Event]:
        """The events of a single-mode run (``s.modes`` names one mode)."""
        for _, e in self.runs(s, stop):
            yield e


__all__ = ["Pause", "Source"]
