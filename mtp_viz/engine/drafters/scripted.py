"""A drafter with a set acceptance: every forward real, the acceptance chosen.

A pair of random weights (:mod:`mtp_viz.sources.shapes`) costs per step what the real
pair costs, but its drafts are noise, so a run of it says nothing about speculation. This
wrapper fixes that without faking a forward: it runs the real drafter (the MTP assistant
over the target's real state and shared KV, at its full cost, every draft) and only
replaces the token each draft proposes. It knows the target's own greedy continuation of
the prompt (``script``, from a plain greedy run of the same target), and at each position
proposes it with probability α, else a token the target will not choose:

    P(draft i accepted | drafts 0..i-1 accepted) = α      for every position i

which is Leviathan et al.'s model (:mod:`mtp_viz.engine.theory`) exactly, so the measured
run and Eq. 1 speak of the same thing. The drafted token is also what the next draft reads
(the assistant's input is the embedding of the token just drafted), as in a real run.

Greedy only: the script is the target's argmax path, and the verdict is exact (a draft
equal to the target's argmax is kept, any other rejected), so the output is the target's
greedy output whatever α is. It is not in :data:`mtp_viz.engine.drafters.DRAFTERS`: it wraps
a drafter built from there and needs a script, which only a measurement has
(:mod:`mtp_viz.measure.profile`). Every view that shows such a run says
:data:`LABEL`.
"""
from __future__ import annotations

import random
from typing import Sequence

from .base import DraftContext, Drafter, Keep, Pick, Proposal

LABEL = "acceptance set to {alpha:g}; every forward real"


class ScriptedDrafter:
    def __init__(self, inner: Drafter, script: Sequence[int], prompt_len: int, alpha: float,
                 vocab_size: int, seed: int = 0):
        if not 0.0 <= alpha <= 1.0:
            raise ValueError("alpha must be within 0 and 1")
        self.inner, self.script, self.prompt_len = inner, list(script), prompt_len
        self.alpha, self.vocab_size, self.seed = float(alpha), vocab_size, seed
        self.kind = inner.kind
        self.needs_target_state = inner.needs_target_state
        self.default_draft_tokens = inner.default_draft_tokens
        self.label = LABEL.format(alpha=self.alpha)
        self.rng = random.Random(self.seed)   # reproducible draws, fresh ones for each generation

    def reset(self) -> None:
        self.inner.reset()

    def rollback(self, verified_len: int) -> None:
        self.inner.rollback(verified_len)

    def _truth(self, ids: list[int], k: int) -> list[int]:
        """The target's next ``k`` greedy tokens after ``ids``, or [] once ``ids`` left
        the script (a tie broken otherwise in low precision): then every draft is wrong."""
        done = ids[self.prompt_len:]
        if done != self.script[:len(done)]:
            return []
        return self.script[len(done):len(done) + k]

    def propose(self, ctx: DraftContext, k: int, pick: Pick, keep: Keep) -> Proposal:
        truth = self._truth(ctx.ids, k)
        right = [self.rng.random() < self.alpha for _ in range(k)]
        drafted: list[int] = []

        def scripted(logits):
            tok, q, row = pick(logits)   # the drafter's own pick, paid for as in a real run
            i = len(drafted)
            if i < len(truth):
                tok = truth[i] if right[i] else (truth[i] + 1) % self.vocab_size
            drafted.append(tok)
            return tok, q, row

        return self.inner.propose(ctx, k, scripted, keep)


__all__ = ["LABEL", "ScriptedDrafter"]
