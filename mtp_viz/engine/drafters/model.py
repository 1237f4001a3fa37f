"""An independent small causal LM as a drafter, with its own KV cache."""
from __future__ import annotations

import torch
from transformers import DynamicCache

from .base import DraftContext, Drafts, Keep, Pick, Proposal, num_assistant_tokens


class ModelDrafter:
    """An independent causal LM drafting autoregressively with its own KV cache."""
    kind = "model"
    needs_target_state = False

    @classmethod
    def build(cls, target, draft_model, step=None) -> "ModelDrafter":
        return cls(draft_model)

    def __init__(self, model):
        self.model = model
        self.default_draft_tokens = num_assistant_tokens(model)
        self.reset()

    def reset(self) -> None:
        self.cache = DynamicCache(config=self.model.config)
        self.cache.activate_past_recording()
        self.cached = 0  # tokens whose KV the cache holds

    @torch.inference_mode()
    def propose(self, ctx: DraftContext, k: int, pick: Pick, keep: Keep) -> Proposal:
        if k <= 0:
            return Proposal([])
        device = self.model.device
        feed = ctx.ids[self.cached:]  # everything verified since the last draft
        drafts = Drafts(pick, keep)
        for _ in range(k):
            out = self.model(input_ids=torch.tensor([feed], device=device), cache=self.cache,
                             use_cache=True, logits_to_keep=1)
            self.cached += len(feed)
            if not drafts.take(out.logits[0, -1]):
                break
            feed = drafts.tokens[-1:]
        return drafts.proposal()

    def rollback(self, verified_len: int) -> None:
        # Keep KV only for tokens the target verified; the newest token is re-fed next time.
        if self.cached == 0:
            return  # nothing drafted yet: the cache is still empty
        keep = min(self.cached, verified_len - 1)
        self.cache.crop(-(self.cached - keep))
        self.cached = keep
