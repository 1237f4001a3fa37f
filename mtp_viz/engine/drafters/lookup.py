"""Prompt lookup: n-gram drafts from the context, no second model."""
from __future__ import annotations

from .base import DraftContext, Keep, Pick, Proposal, num_assistant_tokens


class PromptLookupDrafter:
    """Drafts the continuation of the most recent earlier occurrence of the last n-gram."""
    kind = "lookup"
    needs_target_state = False

    @classmethod
    def build(cls, target, draft_model, step=None) -> "PromptLookupDrafter":
        """Drafts as many tokens as a loaded drafter would (its num_assistant_tokens)."""
        return cls(default_draft_tokens=num_assistant_tokens(draft_model))

    def __init__(self, max_ngram: int = 3, min_ngram: int = 1, default_draft_tokens: int = 4):
        self.max_ngram, self.min_ngram = max_ngram, min_ngram
        self.default_draft_tokens = default_draft_tokens

    def reset(self) -> None:
        pass

    def rollback(self, verified_len: int) -> None:
        pass

    def propose(self, ctx: DraftContext, k: int, pick: Pick, keep: Keep) -> Proposal:
        ids = ctx.ids
        for n in range(min(self.max_ngram, len(ids) - 1), self.min_ngram - 1, -1):
            tail, best = ids[-n:], []
            # Right to left, excluding the tail itself: the most recent match that still
            # has k tokens after it (a match just before the tail, as in a run of
            # repeats, has fewer), else the one with the longest continuation.
            for start in range(len(ids) - n - 1, -1, -1):
                if ids[start:start + n] == tail:
                    follow = ids[start + n:start + n + k]
                    if len(follow) > len(best):
                        best = follow
                    if len(best) == k:
                        break
            if best:
                return Proposal(list(best))
        return Proposal([])
