"""A minimal greedy speculative-decoding loop with a Gemma 4 MTP drafter, used to measure the bundled pair.

It feeds the drafter exactly like transformers' `SinglePositionMultiTokenCandidateGenerator`: a constant
position (the newest token's), the target's shared K/V cropped to the verified positions, and the target's
last hidden state for the newest token (then the drafter's own projected state for later drafts).
Its output equals `target.generate(do_sample=False)`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from transformers import DynamicCache


@dataclass
class SpecResult:
    ids: list[int]                      # generated ids (prompt excluded)
    accepted: list[int] = field(default_factory=list)   # drafts accepted per verification step
    drafted: list[int] = field(default_factory=list)    # drafts proposed per verification step
    forwards: int = 0                   # target forwards, prefill included

    @property
    def mean_accepted_length(self) -> float:
        """New tokens per target forward (the target's own token included)."""
        return len(self.ids) / max(self.forwards, 1)


def _target_step(target, cache, ids: list[int]):
    out = target(input_ids=torch.tensor([ids]), cache=cache, use_cache=True, output_hidden_states=True,
                 return_shared_kv_states=True)
    return out.logits[0].argmax(-1).tolist(), out.hidden_states[-1], dict(out.shared_kv_states)


@torch.inference_mode()
def draft(drafter, embed, token: int, hidden, kv, position: int, k: int) -> list[int]:
    """k greedy drafts from the newest token `token` at `position`, with K/V covering positions < position."""
    mask = torch.ones(1, kv["full_attention"][0].shape[-2], dtype=torch.long)
    pos = torch.tensor([[position]])
    out = []
    for _ in range(k):
        x = torch.cat([embed(torch.tensor([[token]])), hidden], -1)
        o = drafter(inputs_embeds=x, position_ids=pos, shared_kv_states=kv, attention_mask=mask, use_cache=False)
        token = int(o.logits[0, -1].argmax())
        out.append(token)
        hidden = o.last_hidden_state
    return out


@torch.inference_mode()
def greedy_speculative(target, drafter, prompt_ids: list[int], max_new_tokens: int = 64, k: int = 4,
                       eos_token_id: int | None = None) -> SpecResult:
    embed = target.get_input_embeddings()
    cache = DynamicCache(config=target.config)
    cache.activate_past_recording()  # lets sliding-window layers roll back rejected drafts
    ids = list(prompt_ids)
    preds, hidden, kv = _target_step(target, cache, ids)
    cache.crop(0)
    res = SpecResult(ids=[preds[-1]], forwards=1)
    ids.append(preds[-1])
    h = hidden[:, -1:]
    while len(res.ids) < max_new_tokens and res.ids[-1] != eos_token_id:
        m = len(ids) - 1  # position of the newest token, not yet seen by the target
        assert kv["full_attention"][0].shape[-2] == m
        kk = min(k, max_new_tokens - len(res.ids) - 1)
        drafts = draft(drafter, embed, ids[-1], h, kv, m, kk) if kk > 0 else []
        preds, hidden, kv = _target_step(target, cache, [ids[-1]] + drafts)
        res.forwards += 1
        n = 0
        while n < len(drafts) and drafts[n] == preds[n]:
            n += 1
        new = drafts[:n] + [preds[n]]
        if eos_token_id is not None and eos_token_id in new:
            new = new[: new.index(eos_token_id) + 1]
        res.accepted.append(n)
        res.drafted.append(len(drafts))
        rejected = len(drafts) - n
        cache.crop(-rejected)
        kv = {t: (a[:, :, : a.shape[-2] - rejected], b[:, :, : b.shape[-2] - rejected]) for t, (a, b) in kv.items()}
        h = hidden[:, n : n + 1]
        ids.extend(new)
        res.ids.extend(new)
    return res
