"""Processed distributions, seeded draws, and the speculative acceptance rule.

The settings themselves (:class:`Sampling`) live in :mod:`mtp_viz.engine.decoding`.

Notation (Leviathan et al., 2023): the drafter proposes x_i ~ q_i, the target's
processed distribution at the same position is p_i. Accepting x_i with probability
min(1, p_i(x_i) / q_i(x_i)), and on the first rejection drawing the replacement from
norm(max(0, p_i - q_i)), makes every emitted token follow p exactly, whatever q is.
If all k drafts pass, the target's distribution p_k after the last draft gives one
more token for free.

Greedy decoding is the temperature-0 limit: accept while the draft equals argmax p_i,
then emit argmax p_n.
"""
from __future__ import annotations

import torch
from transformers.generation.logits_process import (
    LogitsProcessorList,
    TemperatureLogitsWarper,
    TopKLogitsWarper,
    TopPLogitsWarper,
)

from .decoding import Sampling

__all__ = ["Sampler", "Sampling", "accept", "residual", "softmax_at"]


class Sampler:
    """Turns raw logits into the processed distribution and draws from it.

    The warpers are transformers' own (temperature → top-k → top-p, the order
    ``generate`` applies them), so "the target's distribution" means exactly what
    ``target.generate(do_sample=True, ...)`` samples from.
    """

    def __init__(self, sampling: Sampling, device: torch.device | str = "cpu"):
        sampling.validate()
        self.sampling = sampling
        self.greedy = sampling.greedy
        self.warpers = LogitsProcessorList()
        if not self.greedy:
            if sampling.temperature != 1.0:
                self.warpers.append(TemperatureLogitsWarper(sampling.temperature))
            if sampling.top_k:
                self.warpers.append(TopKLogitsWarper(sampling.top_k))
            if sampling.top_p < 1.0:
                self.warpers.append(TopPLogitsWarper(sampling.top_p))
        # The engine's randomness lives in its own generator; torch's global RNG is
        # never read or reseeded. Greedy decoding draws nothing, so it needs none.
        self.generator = None
        if not self.greedy:
            self.generator = torch.Generator(device=device)
            if sampling.seed is None:
                self.generator.seed()  # fresh entropy, for this generator only
            else:
                self.generator.manual_seed(sampling.seed)

    def probs(self, logits: torch.Tensor) -> torch.Tensor:
        """logits: [n, V] raw → [n, V] processed probabilities (plain softmax when greedy)."""
        logits = logits.float()
        if self.warpers:
            logits = self.warpers(None, logits)
        return torch.softmax(logits, dim=-1)

    def pick(self, probs: torch.Tensor) -> int:
        """One token from a [V] distribution: argmax when greedy, else a seeded draw."""
        if self.greedy:
            return int(probs.argmax())
        return int(torch.multinomial(probs, 1, generator=self.generator))

    def uniform(self) -> float:
        # float32 named: the default dtype is process-wide, and a load beside this run changes it
        return float(torch.rand((), generator=self.generator, device=self.generator.device, dtype=torch.float32))


def softmax_at(logits: torch.Tensor, rows: list[int], cols: list[int]) -> list[float]:
    """softmax(logits[r])[c] for each (r, c), in one gather: exp(logit - logsumexp of its
    row), without building the distributions."""
    lg = logits.float()
    r = torch.tensor(rows, device=lg.device)
    c = torch.tensor(cols, device=lg.device)
    return (lg[r, c] - lg[r].logsumexp(-1)).exp().tolist()


def residual(p_i: torch.Tensor, q_i: torch.Tensor | None, x: int) -> torch.Tensor:
    """norm(max(0, p_i - q_i)): where a correction is drawn after draft x was rejected.

    q_i None means the draft was certain (q_i = one-hot(x))."""
    if q_i is None:
        q_i = torch.nn.functional.one_hot(torch.tensor(x, device=p_i.device), p_i.shape[-1]).to(p_i)
    r = (p_i - q_i).clamp_min(0.0)
    total = float(r.sum())
    # p(x) < q(x) guarantees mass elsewhere; guard against float underflow only
    return r / total if total > 0 else p_i


def accept(sampler: Sampler, drafts: list[int], q: torch.Tensor | None,
           p: torch.Tensor | None, argmax: list[int] | None = None) -> tuple[int, int]:
    """Decide how many drafts to keep and the target's own next token.

    drafts: k proposed ids; q: [k, V] drafter distributions they were drawn from
    (None means each draft was certain, q_i = one-hot(x_i), as for prompt lookup);
    p: [k+1, V] target distributions, p_i conditioned on the prefix and drafts < i.
    argmax: the target's argmax per position, taken on the raw logits (greedy only;
    softmax can round two near-equal logits to the same probability).
    Returns (n accepted, next token), the next token drawn from p_n (all accepted)
    or from the residual norm(max(0, p_n - q_n)) (correction of draft n).
    """
    if sampler.greedy:
        argmax = argmax if argmax is not None else p.argmax(-1).tolist()
        n = 0
        while n < len(drafts) and drafts[n] == argmax[n]:
            n += 1
        return n, argmax[n]
    for i, x in enumerate(drafts):
        q_x = 1.0 if q is None else float(q[i, x])
        # q_x > 0 since x was drawn from q; p(x) >= q(x): always accept
        if sampler.uniform() >= min(1.0, float(p[i, x]) / q_x):
            return i, sampler.pick(residual(p[i], None if q is None else q[i], x))
    n = len(drafts)
    return n, sampler.pick(p[n])
