"""The Source protocol: a run's settings in, an event stream out.

Every front end (the app's comparison, the CLI, ``/generate``, notebooks) takes a
:class:`Source` and consumes what :meth:`Source.runs` yields; none of them asks which
kind it has. A source decides how its runs share the machine and what clock times
them: the local engine interleaves its modes on one thread, each on its own clock
(:mod:`.interleave`); a vLLM server's runs go one after the other, timed by the arrival
of their own streams; a recorded trace replays the times it recorded.

A source says what it can do in :class:`Capabilities`, and every run's start event
says what ran (:class:`mtp_viz.engine.events.Ran`); front ends, views and analysis read
those, never which kind of source they have. To add a source, subclass :class:`Source`
in a module of this package, declare its capabilities, and give
:func:`mtp_viz.sources.open_source` a way to build it (compare transformers'
``CandidateGenerator`` and its factory).
"""
from __future__ import annotations

import threading
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Callable, Iterator

from mtp_viz.engine.events import Event
from mtp_viz.errors import UserError

from .settings import RunSettings

# New tokens of every surface's untimed first run of each mode, before anything is timed
# (the app's load, Measure, the bench, a server bench): the first calls pay for lazy
# initialisation (kernels, allocator, a server's first request), which would otherwise
# land in the first timing a user sees, and in one mode more than the other.
WARM_UP_TOKENS = 8

# step mode's hook: called after a draft ("drafted") and a verification ("verified"),
# returns when the user wants the next phase (see mtp_viz.engine.loop.speculative)
Pause = Callable[[str], None]


@dataclass(frozen=True)
class Capabilities:
    """What a source can do."""
    pausable: bool = False     # step mode can pause it between a draft and its verification
    remote: bool = False       # its runs wait on a server (the app gives them a line of their own,
    #                            so a slow server never holds the local engine)
    repeatable: bool = False   # Measure can repeat its modes in turns, each on its own clock
    experts: bool = False      # it can count the experts a mixture-of-experts router chose
    token_prompt: bool = True  # it takes a prompt as token ids (a server tokenizes text itself)


class Source(ABC):
    """Where runs come from. ``name`` is how status lines speak of it; ``noun`` how a
    sentence about what it cannot do begins ("A vLLM server")."""
    name: str = "a source"
    noun: str = "This source"
    capabilities: Capabilities = Capabilities()

    def check(self, s: RunSettings) -> RunSettings:
        """The settings, checked once, at the boundary: each rule one sentence
        (:meth:`RunSettings.validate`), then what this source cannot do."""
        s.validate()
        can = self.capabilities
        if s.experts and not can.experts:
            raise UserError(f"{self.noun} does not report which experts its router chose, so counting experts "
                            "needs the local engine.")
        if not can.token_prompt and not isinstance(s.prompt, str):
            raise UserError(f"{self.noun} takes a text prompt.")
        return s

    @abstractmethod
    def runs(self, s: RunSettings, stop: threading.Event | None = None,
             pause: Pause | None = None) -> Iterator[tuple[str, Event]]:
        """``(mode, event)`` of the runs ``s.modes`` asks for, in the order they happen.

        ``stop`` set ends every run after its current step; ``pause`` (step mode) is
        honoured where ``capabilities.pausable``. Bad settings raise a one-sentence UserError
        before any event; a failure during a run ends its stream with an ``error``
        event or a UserError."""

    def events(self, s: RunSettings, stop: threading.Event | None = None) -> Iterator[Event]:
        """The events of a single-mode run (``s.modes`` names one mode)."""
        for _, e in self.runs(s, stop):
            yield e


__all__ = ["WARM_UP_TOKENS", "Capabilities", "Pause", "Source"]
