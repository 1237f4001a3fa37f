"""Drafters: who proposes the tokens the target verifies.

A drafter is a small protocol (see :class:`Drafter`): ``reset`` before a generation,
``propose`` up to k tokens given the verified context, ``rollback`` once the target
has decided how many were kept. Three are built in:

- :class:`MTPDrafter`: Gemma 4's multi-token-prediction assistant. It has no KV cache
  and no embedding of its own. For every drafted token it reads
  ``concat(target_embedding(last token), h)`` where h is the target's last-layer
  activation for the first draft and its own (projected) output state after that, sits
  at one constant position (the last verified one), and cross-attends to the target's
  shared KV states covering the verified context.
- :class:`ModelDrafter`: an independent small causal LM that shares the tokenizer,
  with its own KV cache cropped on rejection.
- :class:`PromptLookupDrafter`: n-gram lookup in the context, no second model; its
  drafts are certain (q = one-hot), so acceptance reduces to p(x).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Protocol

import torch
from transformers import DynamicCache

# pick(raw_logits[V]) -> (token id, q of that token, processed q distribution [V] or None
# when greedy: acceptance then needs only the target's argmax)
Pick = Callable[[torch.Tensor], tuple[int, float, "torch.Tensor | None"]]
# keep(index, q) -> False stops drafting after this token (confidence schedule)
Keep = Callable[[int, float], bool]


@dataclass
class DraftContext:
    """What the target knows after its last forward.

    ids: the whole sequence, prompt + generated, ending with the newest token (not yet
    seen by the target). hidden: [1, 1, H] the target's last-layer activation that
    predicted that token. shared_kv: per layer type, (K, V) [1, heads, S, D] covering the
    verified tokens before the newest one (Gemma 4 targets only)."""
    ids: list[int]
    hidden: torch.Tensor | None = None
    shared_kv: dict[str, tuple[torch.Tensor, torch.Tensor]] | None = None


@dataclass
class Proposal:
    tokens: list[int]
    q_tokens: list[float] | None = None  # drafter's probability of each token; None = certain
    q: torch.Tensor | None = None  # [len(tokens), V] distributions drawn from (sampling only)
    forwards: int = 0              # drafter forward passes spent


class _Drafts:
    """Collects one step's drafts: each token, its q, and its q row when sampling."""

    def __init__(self, pick: Pick, keep: Keep):
        self.pick, self.keep = pick, keep
        self.tokens, self.q_tokens, self.rows = [], [], []

    def take(self, logits: torch.Tensor) -> bool:
        """Pick a token from the drafter's logits; False when drafting should stop."""
        tok, q_tok, q_row = self.pick(logits)
        self.tokens.append(tok)
        self.q_tokens.append(q_tok)
        self.rows.append(q_row)
        return self.keep(len(self.tokens) - 1, q_tok)

    def proposal(self) -> Proposal:
        q = torch.stack(self.rows) if self.rows and self.rows[0] is not None else None
        return Proposal(self.tokens, self.q_tokens, q, forwards=len(self.tokens))


class Drafter(Protocol):
    kind: str
    needs_target_state: bool  # wants hidden states + shared KV from every target forward
    default_draft_tokens: int

    def reset(self) -> None: ...
    def propose(self, ctx: DraftContext, k: int, pick: Pick, keep: Keep) -> Proposal: ...
    def rollback(self, verified_len: int) -> None: ...


def _num_assistant_tokens(model, fallback: int = 4) -> int:
    n = getattr(getattr(model, "generation_config", None), "num_assistant_tokens", None)
    return int(n) if n else fallback


class MTPDrafter:
    kind = "mtp"
    needs_target_state = True

    def __init__(self, assistant, target):
        self.assistant = assistant
        self.embed = target.get_input_embeddings()
        self.default_draft_tokens = _num_assistant_tokens(assistant)

    def reset(self) -> None:
        pass

    def rollback(self, verified_len: int) -> None:
        pass  # stateless: everything it reads comes from the target

    @torch.inference_mode()
    def propose(self, ctx: DraftContext, k: int, pick: Pick, keep: Keep) -> Proposal:
        if k <= 0:
            return Proposal([])
        kv = ctx.shared_kv
        device = self.embed.weight.device
        h = ctx.hidden
        # Constant position: the newest token's position, for every draft of this step.
        position = torch.tensor([[len(ctx.ids) - 1]], device=device)
        token = torch.tensor([[ctx.ids[-1]]], device=device)
        drafts = _Drafts(pick, keep)
        for _ in range(k):
            x = torch.cat([self.embed(token), h.to(self.embed.weight.dtype)], dim=-1)
            # No padding at batch size 1: no mask (the sliding window still applies)
            out = self.assistant(inputs_embeds=x, position_ids=position, shared_kv_states=kv,
                                 use_cache=False)
            if not drafts.take(out.logits[0, -1]):
                break
            token = torch.tensor([[drafts.tokens[-1]]], device=device)
            h = out.last_hidden_state  # [1, 1, H_target]: the drafter's own state feeds the next draft
        return drafts.proposal()


class ModelDrafter:
    """An independent causal LM drafting autoregressively with its own KV cache."""
    kind = "model"
    needs_target_state = False

    def __init__(self, model):
        self.model = model
        self.default_draft_tokens = _num_assistant_tokens(model)
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
        drafts = _Drafts(pick, keep)
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


class PromptLookupDrafter:
    """Drafts the continuation of the most recent earlier occurrence of the last n-gram."""
    kind = "lookup"
    needs_target_state = False

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
