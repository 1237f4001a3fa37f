"""Stream slicing: a recorded run as it stood at a moment or after a step.

Race replay, the scrubber and ``mtp-viz replay`` show a recorded run growing; these pure
functions say which prefix of its events a viewer sees.
"""
from __future__ import annotations

from typing import Sequence

from mtp_viz.engine.events import Done, Error, Event, Start, Step, Token


def events_until(events: Sequence[Event], t: float) -> tuple[list[Event], bool]:
    """The prefix of a recorded run visible at ``t`` seconds after its start, and
    whether the run had finished by then. A speculative step shows at its ``Step.t``;
    an autoregressive token at its ``Token.t``."""
    shown: list[Event] = []
    pending: list[Event] = []
    for e in events:
        if isinstance(e, Start):
            shown.append(e)
        elif isinstance(e, Token):
            if e.t > t:
                return shown, False
            shown.append(e)
        elif isinstance(e, Step):
            if e.t > t:
                return shown, False
            shown.extend(pending)
            shown.append(e)
            pending = []
        elif isinstance(e, (Done, Error)):
            if isinstance(e, Done) and e.seconds > t:
                return shown, False
            shown.extend(pending)
            shown.append(e)
            pending = []
        else:
            pending.append(e)
    return shown + pending, True


def events_through_step(events: Sequence[Event], step: int) -> list[Event]:
    """The prefix of a recorded run after its step ``step``: every event of steps up to
    it (a speculative step's drafts, verdicts and summary; an autoregressive token), and
    the run's ``done`` only once every step is in."""
    for i, e in enumerate(events):
        if getattr(e, "step", 0) > step:
            return list(events[:i])
    return list(events)
