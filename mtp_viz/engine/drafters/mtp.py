"""Gemma 4's multi-token-prediction assistant as a drafter (see the package's docstring)."""
from __future__ import annotations

import torch

from ..decoder import EagerDraftStep
from .base import DraftContext, Drafts, Keep, Pick, Proposal, num_assistant_tokens


class MTPDrafter:
    kind = "mtp"
    needs_target_state = True

    @classmethod
    def build(cls, target, draft_model, step=None) -> "MTPDrafter":
        return cls(draft_model, target, step)

    def __init__(self, assistant, target, step=None):
        self.assistant = assistant
        self.embed = target.get_input_embeddings()
        self.default_draft_tokens = num_assistant_tokens(assistant)
        # one draft's forward: the compiled engine's (engine.compiled.FastDraftStep) or eager
        self.step = step if step is not None else EagerDraftStep(assistant)

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
        drafts, compile_s = Drafts(pick, keep), 0.0
        inputs = self.step.inputs(kv, dtype)  # the K/V every draft of this step attends to
        for _ in range(k):
            x = torch.cat([self.embed(token).to(dtype), h.to(dtype)], dim=-1)
            logits, h, c = self.step(x, position, inputs)
            compile_s += c
            # h [1, 1, H_target]: the drafter's own state feeds the next draft
            if not drafts.take(logits):
                break
            token = torch.tensor([[drafts.tokens[-1]]], device=device)
        proposal = drafts.proposal()
        proposal.compile_seconds = compile_s
        return proposal
