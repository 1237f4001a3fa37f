"""The theory of speculative decoding: pure formulas, no state.

Notation follows Leviathan, Kalman & Matias, "Fast Inference from Transformers via
Speculative Decoding" (ICML 2023):

- ``alpha`` (α): the probability that the target accepts a drafted token, assumed the
  same for every position and independent of the others.
- ``draft_tokens`` (γ): the number of tokens drafted per verification step.
- ``c``: the cost coefficient, the time of one drafter step over the time of one
  target step (one autoregressive forward).

Each verification step drafts γ tokens, accepts a prefix of them, and appends one
token of the target's own (the correction after a rejection, or one more token when
all were accepted). The number of tokens a step yields is 1 + (accepted drafts), with

    E[tokens per step] = sum_{k=0..γ} α^k = (1 - α^(γ+1)) / (1 - α)          (Eq. 1)

A step costs γ drafter steps plus one target forward (which verifies all γ drafts at
once), i.e. γc + 1 target-forward units, so the expected wall-time speedup over plain
autoregressive decoding is

    S(α, γ, c) = (1 - α^(γ+1)) / ((1 - α)(γc + 1))                             (Eq. 2)

Two refinements used by :class:`mtp_viz.engine.schedules.OptimalSchedule` and the benchmark report:

- Position-dependent acceptance. MTP drafters get worse the further they draft from
  the target's last hidden state. With α_k the acceptance of position k *given* that
  positions 0..k-1 were accepted (the "conditional" per-position acceptance), Eq. 1
  becomes  E = 1 + α_0 + α_0·α_1 + ... + α_0···α_{γ-1}.
- Verification is not free. On accelerators a forward over γ+1 tokens costs about as
  much as over one token, which is what Eq. 2 assumes. On CPUs (and for large γ) it
  grows with γ. Modelling verify time as v(γ) = T·(1 + sγ) (T the autoregressive step
  time) turns the denominator into 1 + γ(c + s): the verification slope simply adds to
  the drafting cost, and every formula below applies with c' = c + s.
"""
from __future__ import annotations

import math
from typing import Sequence

__all__ = [
    "expected_tokens", "expected_tokens_positional", "predicted_speedup",
    "predicted_speedup_positional", "optimal_draft_tokens", "alpha_mle",
    "alpha_from_tau", "alpha_from_acceptance",
]


def expected_tokens(alpha: float, draft_tokens: int) -> float:
    """Eq. 1: expected tokens per verification step (the target's own token included)."""
    if draft_tokens < 0:
        raise ValueError("draft_tokens must be >= 0")
    alpha = min(max(float(alpha), 0.0), 1.0)
    if alpha >= 1.0:
        return float(draft_tokens + 1)
    return (1.0 - alpha ** (draft_tokens + 1)) / (1.0 - alpha)


def expected_tokens_positional(alphas: Sequence[float]) -> float:
    """Eq. 1 with per-position conditional acceptance α_0..α_{γ-1}: 1 + Σ_k Π_{i<=k} α_i."""
    total, survive = 1.0, 1.0
    for a in alphas:
        survive *= min(max(float(a), 0.0), 1.0)
        total += survive
    return total


def predicted_speedup(alpha: float, draft_tokens: int, c: float) -> float:
    """Eq. 2 (Leviathan et al., Theorem 3.8): expected speedup in wall time."""
    return expected_tokens(alpha, draft_tokens) / (draft_tokens * max(c, 0.0) + 1.0)


def predicted_speedup_positional(alphas: Sequence[float], c: float) -> float:
    """Eq. 2 with per-position acceptance; γ = len(alphas)."""
    return expected_tokens_positional(alphas) / (len(alphas) * max(c, 0.0) + 1.0)


def optimal_draft_tokens(alpha: float | Sequence[float], c: float, cap: int = 16) -> tuple[int, float]:
    """The draft length in 1..cap that maximizes the predicted speedup, and that speedup.

    ``alpha`` is either one acceptance probability (Eq. 2) or per-position conditional
    acceptances (positions beyond the list reuse its last value). S(γ) is not always
    unimodal once acceptance varies by position, so we simply scan: cap is small.
    A returned speedup below 1 means drafting does not pay at all for these numbers.
    """
    if cap < 1:
        raise ValueError("cap must be >= 1")
    if isinstance(alpha, (int, float)):
        alphas = [float(alpha)] * cap
    else:
        alphas = list(alpha) or [0.0]
        alphas = alphas[:cap] + [alphas[-1]] * max(0, cap - len(alphas))
    best, best_s = 1, -math.inf
    for g in range(1, cap + 1):
        s = predicted_speedup_positional(alphas[:g], c)
        if s > best_s + 1e-12:
            best, best_s = g, s
    return best, best_s


def alpha_mle(accepted: float, rejections: float) -> float:
    """Maximum-likelihood α from accepted drafts and rejections (first failures).

    Under Leviathan's model a step is a run of Bernoulli(α) trials that ends at the
    first failure or at γ. Drafts after the first rejection are never tested, so they
    carry no information: the likelihood is α^accepted (1-α)^rejections, maximized at
    accepted / (accepted + rejections). (accepted ÷ drafted, the plain acceptance rate,
    counts the untested drafts as failures and underestimates α when γ > 1.)
    """
    n = accepted + rejections
    return accepted / n if n > 0 else 0.0


def alpha_from_tau(tau: float, draft_tokens: int, tol: float = 1e-10) -> float:
    """Invert Eq. 1: the α at which E[tokens per step] with draft length γ equals ``tau``."""
    if draft_tokens < 1:
        raise ValueError("draft_tokens must be >= 1")
    if tau <= 1.0:
        return 0.0
    if tau >= draft_tokens + 1:
        return 1.0
    lo, hi = 0.0, 1.0  # expected_tokens is increasing in alpha
    while hi - lo > tol:
        mid = (lo + hi) / 2
        if expected_tokens(mid, draft_tokens) < tau:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2


def alpha_from_acceptance(acceptance: float, draft_tokens: int) -> float:
    """The α at which drafts accepted ÷ drafts made, with γ drafted every step, equals ``acceptance``.

    A step of γ drafts accepts E(α, γ) − 1 = α + α² + ... + α^γ of them on average (Eq. 1
    less the target's own token), so the plain acceptance rate is a = (E(α, γ) − 1) / γ.
    It rises with α from 0 to 1, and a = (E − 1)/γ is E = 1 + γa: the α is Eq. 1 inverted
    at τ = 1 + γa (:func:`alpha_from_tau`). At γ = 1 the rate is α itself; for γ > 1 the
    rate is below α, because the drafts after the first rejection count as failures
    (compare :func:`alpha_mle`).
    """
    if draft_tokens < 1:
        raise ValueError("draft_tokens must be >= 1")
    return alpha_from_tau(1.0 + draft_tokens * min(max(float(acceptance), 0.0), 1.0), draft_tokens)
