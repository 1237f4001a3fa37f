"""What if the run had drafted a different constant number of tokens? An estimate.

Pure computation over a :class:`mtp_viz.analysis.metrics.TheoryCheck` (a run's measured
numbers); the formulas are :mod:`mtp_viz.engine.theory`'s, fed with what the run measured:

- α_k, the conditional acceptance of draft position k (given drafts 0..k-1 were
  accepted), as measured. A draft length γ yields, per target forward,

      τ(γ) = 1 + α_0 + α_0·α_1 + … + α_0···α_{γ-1}                 (theory, Eq. 1)

  Positions the run never judged (it drafted fewer, or never got that far) reuse the
  last measured α: those rows are *extrapolated*, and say so.
- c, the drafter step over the target step, as measured.
- v, one verification over one autoregressive step, measured at the run's mean draft
  length γ₀ (needs the autoregressive baseline). Verification of γ+1 tokens is
  modelled as growing linearly, v(γ) = 1 + s·γ with s = (v − 1)/γ₀, which is
  theory's "verification slope": the speedup becomes τ(γ) / (1 + γ(c + s)). Without a
  usable v, s = 0 (Leviathan et al.'s assumption that verifying is free).

This is an estimate: it assumes each position's acceptance does not depend on the
draft length, and that costs scale as measured. Only a run at that length measures it.
"""
from __future__ import annotations

from dataclasses import dataclass

from mtp_viz.engine import theory

from .metrics import TheoryCheck

__all__ = ["WhatIfRow", "WhatIf", "what_if"]


@dataclass(frozen=True)
class WhatIfRow:
    draft_tokens: int
    tau: float                # estimated tokens per target forward at this draft length
    speedup: float            # estimated speedup over autoregressive decoding
    extrapolated: bool        # uses acceptance of positions this run never judged


@dataclass(frozen=True)
class WhatIf:
    rows: tuple[WhatIfRow, ...]
    alphas: tuple[float, ...]  # the measured conditional acceptance per position
    c: float                   # drafter step ÷ target step (measured)
    slope: float               # s: verification cost added per drafted token (0 without a baseline)
    run_draft_tokens: float           # the run's own mean draft length
    run_tau: float             # the run's measured τ
    run_speedup: float | None  # the run's measured speedup (None without a baseline)
    best: int                  # the best draft length among rows the run measured

    @property
    def best_row(self) -> WhatIfRow:
        return next(r for r in self.rows if r.draft_tokens == self.best)


def what_if(check: TheoryCheck | None, cap: int = 12) -> WhatIf | None:
    """τ and speedup estimated for constant draft lengths 1..cap; None when the run
    judged no draft position (nothing was drafted, or no acceptance was measured)."""
    if check is None or cap < 1:
        return None
    alphas: list[float] = []
    for a in check.per_position_conditional:
        if a is None:  # never judged: the positions after it carry no information either
            break
        alphas.append(float(a))
    if not alphas:
        return None
    measured = len(alphas)
    full = alphas[:cap] + [alphas[-1]] * max(0, cap - measured)
    # v(γ₀) = 1 + s·γ₀  =>  s = (v − 1)/γ₀; the cost of a step becomes 1 + γ(c + s)
    slope = (check.v - 1.0) / check.draft_tokens if check.v is not None and check.draft_tokens > 0 else 0.0
    rows = tuple(WhatIfRow(g, theory.expected_tokens_positional(full[:g]),
                           theory.predicted_speedup_positional(full[:g], check.c + slope), g > measured)
                 for g in range(1, cap + 1))
    best = max((r for r in rows if not r.extrapolated), key=lambda r: r.speedup).draft_tokens
    return WhatIf(rows, tuple(alphas), check.c, slope, check.draft_tokens, check.tau, check.speedup_measured, best)
