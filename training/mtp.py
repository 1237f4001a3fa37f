"""The drafter's training-time forward pass, batched over many anchor positions at once.

At inference (transformers' `SinglePositionMultiTokenCandidateGenerator`, and this project's engine), the
drafter proposes tokens after the sequence x_0..x_m, where x_m is the newest token, not yet seen by the
target. It receives

* `shared_kv_states`: the target's K/V of its last sliding and last full-attention layers for positions < m,
* step 1 input: concat(target_embed(x_m), h_{m-1}) where h_{m-1} is the target's last hidden state that produced x_m,
* step j > 1 input: concat(target_embed(d_{j-1}), drafter's previous projected hidden state),

always at `position_ids = [[m]]`, and predicts x_{m+j} at step j.

Here one frozen target pass over a batch of sequences gives h and K/V for every position; each sequence then
gets many query rows, one per anchor m, each with `position_ids = m` and its own attention mask over the
shared K/V (full attention: positions < m; sliding attention: the last `sliding_window + 1` positions < m,
which is what the assistant's bidirectional-then-flipped sliding mask selects for a single query).
`check_parallel_matches_sequential` asserts this gives the same logits as the one-query inference call.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F


@torch.no_grad()
def target_features(target, input_ids: torch.Tensor):
    """One frozen target pass: last hidden states, logits and the shared K/V for every position."""
    out = target(input_ids=input_ids, output_hidden_states=True, return_shared_kv_states=True, use_cache=False)
    kv = {k: (v[0], v[1]) for k, v in out.shared_kv_states.items()}
    return out.hidden_states[-1], out.logits, kv


def anchor_masks(anchors: torch.Tensor, kv_len: int, sliding_window: int) -> dict[str, torch.Tensor]:
    """Boolean 4D masks [B, 1, A, kv_len] (True = attend) for query rows at anchor positions `anchors` [B, A]."""
    pos = torch.arange(kv_len, device=anchors.device).view(1, 1, 1, kv_len)
    m = anchors[:, None, :, None]
    full = pos < m
    sliding = full & (pos >= m - 1 - sliding_window)
    return {"full_attention": full, "sliding_attention": sliding}


def drafter_step(drafter, inputs_embeds, position_ids, masks, kv):
    """One drafting step for all anchor rows, mirroring `Gemma4AssistantForCausalLM.forward` with explicit masks."""
    x = drafter.pre_projection(inputs_embeds)
    # logits_to_keep=None: keep every query row (an int would try to slice rows before the kv-shared layers)
    hs = drafter.model(inputs_embeds=x, attention_mask=masks, position_ids=position_ids, shared_kv_states=kv,
                       use_cache=False, logits_to_keep=None).last_hidden_state
    return drafter.lm_head(hs), drafter.post_projection(hs)


def unrolled_logits(drafter, embed, input_ids, hidden, kv, anchors, steps: int, sliding_window: int):
    """Teacher-forced unrolled drafting from every anchor. Returns a list of `steps` logits [B, A, V]:
    entry j-1 predicts input_ids[b, anchors + j]."""
    masks = anchor_masks(anchors, input_ids.shape[1], sliding_window)
    b_idx = torch.arange(input_ids.shape[0], device=input_ids.device)[:, None]
    prev_hidden = hidden[b_idx, anchors - 1]
    out = []
    for j in range(steps):
        tok = input_ids[b_idx, anchors + j]
        logits, prev_hidden = drafter_step(drafter, torch.cat([embed(tok), prev_hidden], -1), anchors, masks, kv)
        out.append(logits)
    return out


@torch.no_grad()
def sequential_logits(drafter, embed, input_ids, hidden, kv, m: int, steps: int):
    """The inference-time call, one anchor of sequence 0 at a time, teacher-forced with input_ids."""
    kv_m = {k: (v[0][:1, :, :m], v[1][:1, :, :m]) for k, v in kv.items()}
    prev_hidden = hidden[:1, m - 1 : m]
    out = []
    for j in range(steps):
        e = torch.cat([embed(input_ids[:1, m + j : m + j + 1]), prev_hidden], -1)
        o = drafter(inputs_embeds=e, position_ids=torch.tensor([[m]]), shared_kv_states=kv_m,
                    attention_mask=torch.ones(1, m, dtype=torch.long), use_cache=False)
        out.append(o.logits[0, -1])
        prev_hidden = o.last_hidden_state
    return out


@torch.no_grad()
def check_parallel_matches_sequential(target, drafter, input_ids, anchors_to_check, steps=4, rtol=1e-4):
    """Assert the batched training formulation equals the inference call (to float32 rounding, relative to the
    logits' scale). Returns the max abs difference."""
    was_training = drafter.training
    drafter.eval()
    sw = target.config.sliding_window
    hidden, _, kv = target_features(target, input_ids[:1])
    embed = target.get_input_embeddings()
    anchors = torch.tensor([anchors_to_check])
    par = unrolled_logits(drafter, embed, input_ids[:1], hidden, kv, anchors, steps, sw)
    worst = 0.0
    for a, m in enumerate(anchors_to_check):
        seq = sequential_logits(drafter, embed, input_ids, hidden, kv, m, steps)
        for j in range(steps):
            diff = (par[j][0, a] - seq[j]).abs().max().item()
            worst = max(worst, diff)
            assert diff < rtol * max(1.0, seq[j].abs().max().item()), \
                f"anchor {m} step {j + 1}: parallel vs sequential logits differ by {diff}"
    drafter.train(was_training)
    return worst


def distill_loss(drafter_logits, target_logits, input_ids, anchors, step_weights):
    """Soft cross-entropy to the target's next-token distribution at each drafted position, plus metrics.

    Step j (1-based) predicts position anchors + j, whose target distribution is target_logits at anchors + j - 1.
    """
    b_idx = torch.arange(input_ids.shape[0], device=input_ids.device)[:, None]
    total, wsum, metrics = 0.0, 0.0, {}
    for j, (logits, w) in enumerate(zip(drafter_logits, step_weights), start=1):
        t_logits = target_logits[b_idx, anchors + j - 1].float()
        t_prob = t_logits.softmax(-1)
        logp = F.log_softmax(logits.float(), -1)
        loss_j = -(t_prob * logp).sum(-1).mean()
        total = total + w * loss_j
        wsum += w
        with torch.no_grad():
            metrics[f"agree{j}"] = (logits.argmax(-1) == t_logits.argmax(-1)).float().mean().item()
            metrics[f"loss{j}"] = loss_j.item()
    return total / wsum, metrics
