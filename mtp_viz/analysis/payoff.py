"""Does MTP pay off here? The speedup a cost profile predicts, as pure arithmetic.

With measured costs instead of a cost coefficient (:mod:`mtp_viz.engine.theory`'s c and
verification slope), Leviathan et al.'s Eq. 2 reads, for γ drafts at acceptance α:

    S(α, γ) = E(α, γ) · t_plain / (γ · t_draft + t_verify(γ + 1))

where E(α, γ) = (1 − α^(γ+1)) / (1 − α) is the expected tokens per step (Eq. 1),
t_plain the fastest plain decoder's step, t_draft one draft of this engine's drafter and
t_verify(w) this engine's forward over w tokens with the state MTP reads. Every t is a
median the profile measured (:mod:`mtp_viz.measure.profile`); nothing is assumed about how
verification grows with width.

A whole run of n tokens also pays its prompt once (P, the prefill, which gives the first
token), so the speedup a run of n tokens should measure is

    S_run = (P_plain + (n − 1) · t_plain) / (P + (n − 1) / E · (γ · t_draft + t_verify(γ + 1)))

which tends to S(α, γ) as n grows. The break-even acceptance of γ is the α with S = 1
(S grows with α, so it is found by bisection; None when even α = 1 does not pay), and the
best draft length at α the γ of largest S.
"""
from __future__ import annotations

from typing import Sequence

from mtp_viz.engine import theory


def speedup(alpha: float, draft_tokens: int, plain: float, verify: dict[int, float], draft: float) -> float:
    """S(α, γ) over a plain step of ``plain`` seconds (see the module's docstring)."""
    return theory.expected_tokens(alpha, draft_tokens) * plain / (draft_tokens * draft + verify[draft_tokens + 1])


def run_speedup(alpha: float, draft_tokens: int, n: int, plain: float, plain_prefill: float, verify: dict[int, float],
                draft: float, prefill: float) -> float:
    """S_run for a run of ``n`` new tokens (prefills in seconds, whole prompt)."""
    step = draft_tokens * draft + verify[draft_tokens + 1]
    return (plain_prefill + (n - 1) * plain) / (prefill + (n - 1) / theory.expected_tokens(alpha, draft_tokens) * step)


def break_even(draft_tokens: int, plain: float, verify: dict[int, float], draft: float,
               tol: float = 1e-6) -> float | None:
    """The acceptance at which γ drafts neither gain nor lose; None if none in [0, 1]."""
    if speedup(1.0, draft_tokens, plain, verify, draft) < 1.0:
        return None
    if speedup(0.0, draft_tokens, plain, verify, draft) >= 1.0:
        return 0.0
    lo, hi = 0.0, 1.0
    while hi - lo > tol:
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if speedup(mid, draft_tokens, plain, verify, draft) < 1.0 else (lo, mid)
    return (lo + hi) / 2


def best_draft_tokens(alpha: float, plain: float, verify: dict[int, float], draft: float) -> tuple[int, float]:
    """The draft length of largest S at ``alpha`` among those measured, and that S."""
    draft_tokens_list = sorted(w - 1 for w in verify if w > 1)
    return max(((g, speedup(alpha, g, plain, verify, draft)) for g in draft_tokens_list), key=lambda gs: gs[1])


def curves(plain: float, verify: dict[int, float], draft: float, alphas: Sequence[float]) -> dict:
    """For every measured γ: S at each α, and its break-even α; for each α, the best γ."""
    draft_tokens_list = sorted(w - 1 for w in verify if w > 1)
    return {
        "alphas": list(alphas),
        "speedup": {g: [speedup(a, g, plain, verify, draft) for a in alphas] for g in draft_tokens_list},
        "break_even": {g: break_even(g, plain, verify, draft) for g in draft_tokens_list},
        "best": {a: best_draft_tokens(a, plain, verify, draft) for a in alphas},
    }


def grid(step: float = 0.05) -> list[float]:
    """α from 0 to 1 in ``step``s, for a curve."""
    n = round(1 / step)
    return [round(i * step, 6) for i in range(n + 1)]


__all__ = ["best_draft_tokens", "break_even", "curves", "grid", "run_speedup", "speedup"]
