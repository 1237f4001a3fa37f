"""Train the MTP drafter (a Gemma4AssistantForCausalLM) against the frozen tiny target."""

from __future__ import annotations

from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from .common import JsonlLog, Progress, WindowSampler, flatten, lr_at, seed_everything, store_weights
from .data import encode_files
from .models import DEFAULT_DRAFT_TOKENS, build_drafter, n_params
from .mtp import check_parallel_matches_sequential, distill_loss, target_features, unrolled_logits


def width_basis(target, width: int) -> torch.Tensor:
    """An orthonormal basis [D, width] of the target's residual stream: the top right-singular vectors of its
    embedding matrix (which is also its tied output head, so these are the directions its logits read most)."""
    _, _, vh = torch.linalg.svd(target.model.embed_tokens.weight.detach().float(), full_matrices=False)
    return vh[:width].T.contiguous()


@torch.no_grad()
def init_from_target(drafter, target) -> list[str]:
    """Warm start: the target's embedding (the drafter's tied lm_head), final norm and, for each drafter layer, the
    weights of the target's last layer of that attention type (the layer whose K/V it reads).

    A drafter narrower than the target (d < D, as the real assistants are) gets them projected onto `width_basis`
    P [D, d]: a hidden-side input axis W -> W P, a hidden-side output axis W -> P^T W, the embedding E -> E P (so
    the drafter's logits h E_d^T = (h P^T) E^T read the target's head), and an RMSNorm gain over the hidden
    size g -> diag(P^T diag(g) P) * sqrt(D / d) (a vector's RMS over the d kept directions is sqrt(D / d) times
    its RMS over all D)."""
    D = target.model.embed_tokens.weight.shape[1]
    d = drafter.model.embed_tokens.weight.shape[1]
    P = None if d == D else width_basis(target, d)

    def fit(w: torch.Tensor, shape: torch.Size) -> torch.Tensor | None:
        w = w.float()
        if w.shape == shape:
            return w
        if P is None:
            return None
        if w.ndim == 1 and w.shape[0] == D and shape == (d,):
            return ((P * P) * w[:, None]).sum(0) * (D / d) ** 0.5
        if w.ndim == 2 and len(shape) == 2:
            if w.shape[0] == D and shape[0] == d:
                w = P.T @ w
            if w.shape[1] == D and shape[1] == d:
                w = w @ P
            return w if w.shape == shape else None
        return None

    copied = []
    e = fit(target.model.embed_tokens.weight, drafter.model.embed_tokens.weight.shape)
    if e is not None:
        drafter.model.embed_tokens.weight.copy_(e)
        drafter.lm_head.weight = drafter.model.embed_tokens.weight
        copied.append("embed_tokens/lm_head" + ("" if P is None else " (projected)"))
    n = fit(target.model.norm.weight, drafter.model.norm.weight.shape)
    if n is not None:
        drafter.model.norm.weight.copy_(n)
        copied.append("norm")
    t_types = target.config.layer_types
    for i, layer in enumerate(drafter.model.layers):
        src_idx = max(k for k, t in enumerate(t_types) if t == layer.self_attn.layer_type)
        src = dict(target.model.layers[src_idx].named_parameters())
        for name, p in layer.named_parameters():
            w = fit(src[name], p.shape) if name in src else None
            if w is not None:
                p.copy_(w)
                copied.append(f"layers.{i}.{name}<-{src_idx}")
    return copied


def train_drafter(args, out: Path, log_dir: Path, train_files, held_files):
    seed_everything(args.seed + 1)
    tokenizer = AutoTokenizer.from_pretrained(out / "target")
    target = AutoModelForCausalLM.from_pretrained(out / "target", dtype=torch.float32)
    target.eval().requires_grad_(False)
    embed = target.get_input_embeddings()
    sw = target.config.sliding_window
    K, T = args.drafter_unroll, args.seq_len

    drafter = build_drafter(target.config, quick=args.quick)
    copied = init_from_target(drafter, target)
    log = JsonlLog(log_dir / "drafter_log.jsonl")
    log(event="start", params=n_params(drafter), target_params=n_params(target), unroll=K,
        max_steps=args.drafter_steps, minutes=args.drafter_minutes, batch_size=args.drafter_batch,
        anchors=args.drafter_anchors, init_copied=len(copied))

    train = WindowSampler(flatten(encode_files(tokenizer, train_files)), T, args.seed + 1)
    val_x = WindowSampler(flatten(encode_files(tokenizer, held_files)), T, args.seed + 1).fixed(2 if args.quick else 8)

    # The batched training formulation must give exactly what the inference-time call gives.
    check_anchors = sorted({1, 2, 3, T // 4, T // 2, sw + 1, sw + 2, T - K - 1} & set(range(1, T - K)))
    diff = check_parallel_matches_sequential(target, drafter, val_x[:1], check_anchors, steps=K)
    log(event="parallel_vs_sequential_check", anchors=check_anchors, max_abs_diff=diff, passed=True)

    weights = [0.8**j for j in range(K)]
    all_anchors = torch.arange(1, T - K)

    def sample_anchors(b: int, gen=None) -> torch.Tensor:
        if args.drafter_anchors >= len(all_anchors):
            return all_anchors.expand(b, -1)
        idx = torch.stack([torch.randperm(len(all_anchors), generator=gen)[: args.drafter_anchors] for _ in range(b)])
        return all_anchors[idx].sort(-1).values

    @torch.no_grad()
    def validate() -> dict:
        drafter.eval()
        agg = {}
        for xb in val_x.split(4):
            hidden, t_logits, kv = target_features(target, xb)
            anchors = all_anchors.expand(xb.shape[0], -1)
            logits = unrolled_logits(drafter, embed, xb, hidden, kv, anchors, K, sw)
            _, met = distill_loss(logits, t_logits, xb, anchors, weights)
            for k, v in met.items():
                agg[k] = agg.get(k, 0.0) + v / len(val_x.split(4))
        drafter.train()
        return {f"val_{k}": round(v, 4) for k, v in agg.items()}

    params = [p for p in drafter.parameters() if p.requires_grad]
    decay = [p for p in params if p.ndim >= 2]
    no_decay = [p for p in params if p.ndim < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.05}, {"params": no_decay, "weight_decay": 0.0}],
                            lr=args.drafter_lr, betas=(0.9, 0.95))
    gen = torch.Generator().manual_seed(args.seed + 2)
    prog = Progress(args.drafter_steps, args.drafter_minutes)
    log_every, eval_every = (1, 5) if args.quick else (10, 50)
    if not args.quick:
        log(event="val", step=0, elapsed_s=0.0, **validate())
    step, ema = 0, None
    drafter.train()
    while prog(step) < 1.0:
        lr = lr_at(prog(step), args.drafter_lr, warmup_frac=0.03)
        for g in opt.param_groups:
            g["lr"] = lr
        x = train.batch(args.drafter_batch)
        hidden, t_logits, kv = target_features(target, x)
        anchors = sample_anchors(x.shape[0], gen)
        logits = unrolled_logits(drafter, embed, x, hidden, kv, anchors, K, sw)
        loss, met = distill_loss(logits, t_logits, x, anchors, weights)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        gn = torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        step += 1
        ema = loss.item() if ema is None else 0.95 * ema + 0.05 * loss.item()
        if step % log_every == 0 or prog(step) >= 1.0:
            val = validate() if step % eval_every == 0 or prog(step) >= 1.0 else {}
            log(event="train", step=step, elapsed_s=round(prog.elapsed(), 1), lr=lr, loss=round(loss.item(), 4),
                loss_ema=round(ema, 4), grad_norm=round(float(gn), 3),
                **{k: round(v, 4) for k, v in met.items()}, **val)
    log(event="done", step=step, elapsed_s=round(prog.elapsed(), 1), loss_ema=ema, **validate())

    diff = check_parallel_matches_sequential(target, drafter, val_x[:1], check_anchors, steps=K)
    log(event="parallel_vs_sequential_check", anchors=check_anchors, max_abs_diff=diff, passed=True)

    drafter.eval()
    gc = drafter.generation_config
    gc.num_assistant_tokens = DEFAULT_DRAFT_TOKENS
    gc.bos_token_id, gc.eos_token_id, gc.pad_token_id = (tokenizer.bos_token_id, tokenizer.eos_token_id,
                                                          tokenizer.pad_token_id)
    d_out = out / "drafter"
    d_out.mkdir(parents=True, exist_ok=True)
    drafter.save_pretrained(d_out)
    store_weights(d_out, args.storage)
    tokenizer.save_pretrained(d_out)
    return drafter
