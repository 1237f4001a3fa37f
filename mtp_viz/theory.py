"""The theory of speculative decoding, and a draft-length schedule built on it.

Notation follows Leviathan, Kalman & Matias, "Fast Inference from Transformers via
Speculative Decoding" (ICML 2023):

- ``alpha`` (α): the probability that the target accepts a drafted token, assumed the
  same for every position and independent of the others.
- ``gamma`` (γ): the number of tokens drafted per verification step.
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

Two refinements used by :class:`OptimalSchedule` and the benchmark report:

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
from dataclasses import dataclass, field
from typing import Sequence

from .schedules import Schedule

__all__ = [
    "expected_tokens", "expected_tokens_positional", "predicted_speedup",
    "predicted_speedup_positional", "optimal_gamma", "alpha_mle",
    "alpha_from_mean_accepted_length", "OptimalSchedule",
]


def expected_tokens(alpha: float, gamma: int) -> float:
    """Eq. 1: expected tokens per verification step (the target's own token included)."""
    if gamma < 0:
        raise ValueError("gamma must be >= 0")
    alpha = min(max(float(alpha), 0.0), 1.0)
    if alpha >= 1.0:
        return float(gamma + 1)
    return (1.0 - alpha ** (gamma + 1)) / (1.0 - alpha)


def expected_tokens_positional(alphas: Sequence[float]) -> float:
    """Eq. 1 with per-position conditional acceptance α_0..α_{γ-1}: 1 + Σ_k Π_{i<=k} α_i."""
    total, survive = 1.0, 1.0
    for a in alphas:
        survive *= min(max(float(a), 0.0), 1.0)
        total += survive
    return total


def predicted_speedup(alpha: float, gamma: int, c: float) -> float:
    """Eq. 2 (Leviathan et al., Theorem 3.8): expected speedup in wall time."""
    return expected_tokens(alpha, gamma) / (gamma * max(c, 0.0) + 1.0)


def predicted_speedup_positional(alphas: Sequence[float], c: float) -> float:
    """Eq. 2 with per-position acceptance; γ = len(alphas)."""
    return expected_tokens_positional(alphas) / (len(alphas) * max(c, 0.0) + 1.0)


def optimal_gamma(alpha: float | Sequence[float], c: float, cap: int = 16) -> tuple[int, float]:
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


def alpha_from_mean_accepted_length(tau: float, gamma: int, tol: float = 1e-10) -> float:
    """Invert Eq. 1: the α at which E[tokens per step] with draft length γ equals ``tau``."""
    if gamma < 1:
        raise ValueError("gamma must be >= 1")
    if tau <= 1.0:
        return 0.0
    if tau >= gamma + 1:
        return 1.0
    lo, hi = 0.0, 1.0  # expected_tokens is increasing in alpha
    while hi - lo > tol:
        mid = (lo + hi) / 2
        if expected_tokens(mid, gamma) < tau:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2


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

    ``decay`` = 0.93 remembers about the last 1/(1 − 0.93) ≈ 14 steps. In
    benchmarks/schedule_sim.py it stays within 2% of the best constant draft length on
    stationary acceptance and follows a switch between code-like and chat-like text
    better than the heuristic; slower forgetting (0.97–0.99) gains under 1% on
    stationary text and loses 4–5% on the switching one.
    """
    name: str = "optimal"
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
        gamma, speedup = optimal_gamma(self.position_alphas(self.cap), c + s, self.cap)
        self.current = self._clamp(gamma)
        return self.current, (f"α≈{self.alpha():.2f} c≈{c:.2f}"
                              + (f" s≈{s:.2f}" if s else "")
                              + f": γ*={self.current} (×{speedup:.2f} predicted)")
