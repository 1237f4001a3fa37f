"""Gemma 4's multi-token-prediction assistant as a drafter (see the package's docstring)."""
from __future__ import annotations

import torch

from .base import DraftContext, Drafts, Keep, Pick, Proposal, num_assistant_tokens


class MTPDrafter:
    kind = "mtp"
    needs_target_state = True

    @classmethod
    def build(cls, target, draft_model) -> "MTPDrafter":
        return cls(draft_model, target)

    def __init__(self, assistant, target):
        self.assistant = assistant
        self.embed = target.get_input_embeddings()
        self.default_draft_tokens = num_assistant_tokens(assistant)

    def reset(self) -> None:
        pass

    def rollback(self, verified_len: int) -> None:
        pass  # stateless: everything it reads comes from the target

    @torch.inference_mode()
    def propose(self, ctx: DraftContext, k: int, pick: Pick, keep: Keep) -> Proposal:
        if k <= 0:
            return Proposal([])
        # a drafter in another precision than its target's (a bf16 drafter over a float32
        # target) reads the target's state and K/V in its own dtype
        dtype = self.assistant.dtype
        kv = None if ctx.shared_kv is None else {
            kind: (keys.to(dtype), values.to(dtype)) for kind, (keys, values) in ctx.shared_kv.items()}
        device = self.embed.weight.device
        h = ctx.hidden
        # Constant position: the newest token's position, for every draft of this step.
        position = torch.tensor([[len(ctx.ids) - 1]], device=device)
        token = torch.tensor([[ctx.ids[-1]]], device=device)
        drafts = Drafts(pick, keep)
        for _ in range(k):
            x = torch.cat([self.embed(token).to(dtype), h.to(dtype)], dim=-1)
            # No padding at batch size 1: no mask (the sliding window still applies)
            out = self.assistant(inputs_embeds=x, position_ids=position, shared_kv_states=kv,
                                 use_cache=False)
            if not drafts.take(out.logits[0, -1]):
                break
            token = torch.tensor([[drafts.tokens[-1]]], device=device)
            h = out.last_hidden_state  # [1, 1, H_target]: the drafter's own state feeds the next draft
        return drafts.proposal()
