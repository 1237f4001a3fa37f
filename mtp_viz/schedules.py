"""Draft-length schedules: how many tokens to draft in the next step.

A schedule sees only counts and timings, never models, so it works with every
drafter. Semantics follow transformers' ``num_assistant_tokens_schedule``:

- ``constant``: always the initial length.
- ``heuristic``: +2 after a step whose drafts were all accepted, -1 otherwise
  (floor 1). The length carries over to the next generation when the same schedule
  object is reused, as transformers writes it back into the drafter's config.
- ``heuristic_transient``: the same, restarting from the initial length each generation.
- ``confidence``: draft up to the initial length, but stop after a token whose
  drafter probability falls below a threshold (``assistant_confidence_threshold``).
- ``optimal``: see :mod:`mtp_viz.theory`; picks the length that maximizes the
  predicted speedup from the running acceptance estimate and the measured cost ratio.

Every schedule is capped by ``cap`` (and floored at 1).
"""
from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class Schedule:
    """Base: the constant schedule. Subclasses override ``update`` / ``keep_drafting``."""
    initial: int = 4
    cap: int = 16
    name: str = "constant"
    current: int = field(default=0, init=False)

    def start(self) -> int:
        """Called at the start of each generation; returns the first draft length."""
        if self.current <= 0 or self.restarts:
            self.current = self._clamp(self.initial)
        return self.current

    restarts = True

    def update(self, *, drafted: int, accepted: int, draft_seconds: float = 0.0,
               verify_seconds: float = 0.0) -> tuple[int, str]:
        """Called after each verification; returns (next draft length, reason)."""
        return self.current, "constant"

    def keep_drafting(self, index: int, q: float) -> bool:
        """Called after drafting the token at ``index`` with drafter probability ``q``."""
        return True

    def _clamp(self, n: int) -> int:
        return max(1, min(int(n), self.cap))


@dataclass
class HeuristicSchedule(Schedule):
    name: str = "heuristic"
    restarts = False

    def update(self, *, drafted, accepted, draft_seconds=0.0, verify_seconds=0.0):
        if drafted == 0:
            return self.current, "nothing drafted"
        if accepted == drafted:
            self.current = self._clamp(self.current + 2)
            return self.current, "all accepted: +2"
        self.current = self._clamp(self.current - 1)
        return self.current, "rejection: -1"


@dataclass
class TransientHeuristicSchedule(HeuristicSchedule):
    name: str = "heuristic_transient"
    restarts = True


@dataclass
class ConfidenceSchedule(Schedule):
    """Draft up to ``initial`` tokens; stop early once the drafter is unsure of its token."""
    threshold: float = 0.4
    name: str = "confidence"

    def update(self, *, drafted, accepted, draft_seconds=0.0, verify_seconds=0.0):
        return self.current, f"draft until q < {self.threshold:g}"

    def keep_drafting(self, index: int, q: float) -> bool:
        return q >= self.threshold


SCHEDULES = ("constant", "heuristic", "heuristic_transient", "confidence", "optimal")


def make_schedule(name: str, initial: int = 4, cap: int = 16, **kwargs) -> Schedule:
    """Build a schedule by name; ``kwargs`` go to its constructor (e.g. ``threshold``)."""
    if name == "constant":
        return Schedule(initial=initial, cap=cap, **kwargs)
    if name == "heuristic":
        return HeuristicSchedule(initial=initial, cap=cap, **kwargs)
    if name == "heuristic_transient":
        return TransientHeuristicSchedule(initial=initial, cap=cap, **kwargs)
    if name == "confidence":
        return ConfidenceSchedule(initial=initial, cap=cap, **kwargs)
    if name == "optimal":
        from .theory import OptimalSchedule
        return OptimalSchedule(initial=initial, cap=cap, **kwargs)
    raise ValueError(f"Unknown schedule {name!r}; choose one of {', '.join(SCHEDULES)}.")
