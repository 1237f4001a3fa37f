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
- ``optimal``: :class:`OptimalSchedule` picks the length that maximizes the predicted
  speedup of :mod:`mtp_viz.engine.theory` from running estimates of acceptance and cost.

Every schedule is capped by ``cap`` (and floored at 1).
"""
from __future__ import annotations

from dataclasses import dataclass, field

from .decoding import MAX_DRAFT_TOKENS
from .theory import optimal_draft_tokens


@dataclass
class Schedule:
    """Base: the constant schedule. Subclasses override ``update`` / ``keep_drafting``."""
    initial: int = 4
    cap: int = MAX_DRAFT_TOKENS
    name: str = "constant"
    current: int = field(default=0, init=False)

    def start(self) -> int:
        """Called at the start of each generation; returns the first draft length."""
        if self.current <= 0 or self.restarts:
            self.current = self._clamp(self.initial)
        return self.current

    restarts = True
    adapts = False   # whether update() may change the length (then any length up to ``cap``)

    @property
    def longest(self) -> int:
        """The longest draft this schedule can ask for: its first length unless it adapts,
        else ``cap`` (what the compiled engine compiles for before a run)."""
        return self.cap if self.adapts else self._clamp(self.initial)

    @property
    def fixed(self) -> bool:
        """Whether every step asks for :attr:`longest` drafts (the constant schedule: it
        neither adapts nor stops a draft early)."""
        return not self.adapts and type(self).keep_drafting is Schedule.keep_drafting

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
    adapts = True

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


@dataclass
class OptimalSchedule(Schedule):
    """Pick each draft length to maximize the predicted speedup (Eq. 2).

    After every verification it updates three running estimates and re-solves
    γ* = argmax_γ E(γ) / (1 + γ(c + s)):

    1. Acceptance, per position. Position k is *tried* when all drafts before it were
       accepted. With exponentially forgotten counts (factor ``decay`` per step, so the
       estimate follows a prompt whose difficulty changes), the pooled acceptance is the
       posterior mean of a Beta(``prior_accept``, ``prior_reject``) prior,
           α = (a0 + Σ accepted) / (a0 + b0 + Σ accepted + Σ rejections),
       the Bayesian version of :func:`alpha_mle`. Each position's conditional
       acceptance is shrunk towards that pooled α with ``shrink`` pseudo-trials:
           α_k = (hits_k + shrink·α) / (trials_k + shrink),
       so a position tried rarely (deep in the draft) falls back on the pooled value.
    2. Drafting cost c: drafter seconds per drafted token over the time of a target
       step. The schedule never sees an autoregressive step, so it uses the intercept T
       of the verify-time line below as the target step time.
    3. Verification slope s: a decayed least-squares line verify_seconds ≈ T + T·s·γ
       over the steps seen so far; s = 0 (Leviathan's assumption) until two different
       draft lengths have been seen, and never below 0.

    Until timings arrive (e.g. a test feeding zeros) c falls back to ``prior_c``.

    ``decay`` = 0.93 remembers about the last 1/(1 − 0.93) ≈ 14 steps; how it compares
    with the best constant length and with slower forgetting is measured by
    benchmarks/schedule_sim.py (benchmarks/results/schedule_sim.md).
    """
    name: str = "optimal"
    adapts = True
    prior_accept: float = 1.0
    prior_reject: float = 1.0
    shrink: float = 4.0
    decay: float = 0.93
    prior_c: float = 0.1
    restarts = False
    # running state (decayed sums)
    _acc: float = field(default=0.0, init=False, repr=False)
    _rej: float = field(default=0.0, init=False, repr=False)
    _hits: list = field(default_factory=list, init=False, repr=False)
    _trials: list = field(default_factory=list, init=False, repr=False)
    _draft_s: float = field(default=0.0, init=False, repr=False)
    _drafted: float = field(default=0.0, init=False, repr=False)
    # weighted sums for the verify-time line: w, Σwx, Σwy, Σwxx, Σwxy
    _line: list = field(default_factory=lambda: [0.0] * 5, init=False, repr=False)

    def alpha(self) -> float:
        """Posterior mean of the pooled acceptance probability."""
        a0, b0 = self.prior_accept, self.prior_reject
        return (a0 + self._acc) / (a0 + b0 + self._acc + self._rej)

    def position_alphas(self, n: int) -> list[float]:
        """Shrunk conditional acceptance for positions 0..n-1."""
        pooled = self.alpha()
        out = []
        for k in range(n):
            h = self._hits[k] if k < len(self._hits) else 0.0
            t = self._trials[k] if k < len(self._trials) else 0.0
            out.append((h + self.shrink * pooled) / (t + self.shrink))
        return out

    def verify_line(self) -> tuple[float, float]:
        """(T, s): verify time ≈ T·(1 + s·γ); (0, 0) before any timing."""
        w, sx, sy, sxx, sxy = self._line
        if w <= 0 or sy <= 0:
            return 0.0, 0.0
        mx, my = sx / w, sy / w
        var = sxx / w - mx * mx
        slope = (sxy / w - mx * my) / var if var > 1e-9 else 0.0
        slope = max(slope, 0.0)
        intercept = my - slope * mx
        if intercept <= 0:          # noisy fit: fall back to a flat line
            return my, 0.0
        return intercept, slope / intercept

    def cost(self) -> tuple[float, float]:
        """(c, s) as defined in the class docstring."""
        T, s = self.verify_line()
        if T <= 0 or self._drafted <= 0 or self._draft_s <= 0:
            return self.prior_c, s
        return (self._draft_s / self._drafted) / T, s

    def update(self, *, drafted, accepted, draft_seconds=0.0, verify_seconds=0.0):
        if drafted == 0:  # the prefill, or a step with no room left: nothing learned
            return self.current, "nothing drafted"
        d = self.decay
        self._acc *= d
        self._rej *= d
        self._hits = [h * d for h in self._hits]
        self._trials = [t * d for t in self._trials]
        self._draft_s *= d
        self._drafted *= d
        self._line = [v * d for v in self._line]
        rejected = 1 if accepted < drafted else 0
        self._acc += accepted
        self._rej += rejected
        tried = accepted + rejected
        while len(self._trials) < tried:
            self._hits.append(0.0)
            self._trials.append(0.0)
        for k in range(tried):
            self._trials[k] += 1
            self._hits[k] += 1 if k < accepted else 0
        if draft_seconds > 0:
            self._draft_s += draft_seconds
            self._drafted += drafted
        if verify_seconds > 0:
            x, y = float(drafted), float(verify_seconds)
            for i, v in enumerate((1.0, x, y, x * x, x * y)):
                self._line[i] += v
        c, s = self.cost()
        draft_tokens, speedup = optimal_draft_tokens(self.position_alphas(self.cap), c + s, self.cap)
        self.current = self._clamp(draft_tokens)
        return self.current, (f"α≈{self.alpha():.2f} c≈{c:.2f}"
                              + (f" s≈{s:.2f}" if s else "")
                              + f": γ*={self.current} (×{speedup:.2f} predicted)")


# name -> class: the one table the engine, the CLI, links and the UI read. A new
# schedule is a subclass above and one entry here.
SCHEDULES: dict[str, type[Schedule]] = {
    "constant": Schedule,
    "heuristic": HeuristicSchedule,
    "heuristic_transient": TransientHeuristicSchedule,
    "confidence": ConfidenceSchedule,
    "optimal": OptimalSchedule,
}


def make_schedule(name: str, initial: int = 4, cap: int = MAX_DRAFT_TOKENS, **kwargs) -> Schedule:
    """Build a schedule by name; ``kwargs`` go to its constructor (e.g. ``threshold``)."""
    if name not in SCHEDULES:
        raise ValueError(f"Unknown schedule {name!r}; choose one of {', '.join(SCHEDULES)}.")
    return SCHEDULES[name](initial=initial, cap=cap, **kwargs)


class ScheduleCache:
    """Schedules created once per (name, drafter kind, first length, cap) and then
    reused, so an adaptive schedule carries what it learned into the next generation (as
    transformers keeps the heuristic's length in the assistant's config). Whoever owns
    that memory holds one: a model pair, a browser session, a benchmark."""

    def __init__(self) -> None:
        self._made: dict[tuple[str, str, int, int], Schedule] = {}

    def get(self, name: str, kind: str, initial: int, cap: int) -> Schedule:
        key = (name, kind, initial, cap)
        if key not in self._made:
            self._made[key] = make_schedule(name, initial=initial, cap=cap)
        return self._made[key]
