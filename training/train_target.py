"""Train the tiny Gemma 4 target (a Gemma4ForCausalLM) on stdlib source code."""

from __future__ import annotations

from pathlib import Path

import torch

from .common import JsonlLog, Progress, WindowSampler, flatten, lr_at, seed_everything, store_weights
from .models import build_target, n_params, upscale_target

# Learning-rate multiplier for the zero-initialised norm gains of layers inserted by depth up-scaling, so they can
# grow to the scale of the others (about 1) within a short fine-tuning phase.
INSERTED_GAIN_LR_MULT = 10.0


def train_target(tokenizer, train_docs, val_docs, out_dir: Path, log_dir: Path, *, quick: bool, seed: int,
                 max_steps: int, minutes: float, batch_size: int, seq_len: int, peak_lr: float,
                 init_from: Path | None = None, phase: int = 1, upscale_layers: int | None = None,
                 storage: str = "bfloat16"):
    """Train from scratch, or (`init_from`) continue from a saved target with a fresh warmup + cosine phase;
    with `upscale_layers`, the saved target is first grown to that depth (`models.upscale_target`)."""
    seed_everything(seed + 100 * (phase - 1))
    zeroed: list[str] = []
    if init_from is not None:
        from transformers import AutoModelForCausalLM

        model = AutoModelForCausalLM.from_pretrained(init_from, dtype=torch.float32)
    else:
        model = build_target(quick, vocab_size=len(tokenizer))
    model.config.use_cache = False
    log = JsonlLog(log_dir / "target_log.jsonl", append=phase > 1)
    val_batch = WindowSampler(flatten(val_docs), seq_len, seed).fixed(4 if quick else 32)

    @torch.no_grad()
    def val_loss() -> float:
        was_training = model.training
        model.eval()
        losses = [model(input_ids=b, labels=b).loss.item() for b in val_batch.split(8)]
        model.train(was_training)
        return sum(losses) / len(losses)

    if upscale_layers:
        before, small_layers = val_loss(), model.config.num_hidden_layers
        model, zeroed = upscale_target(model, upscale_layers)
        model.config.use_cache = False
        after = val_loss()
        assert abs(after - before) < 1e-4 * max(1.0, abs(before)), \
            f"up-scaling changed the held-out loss: {before} -> {after}"
        log(event="upscale", phase=phase, from_layers=small_layers, to_layers=upscale_layers,
            inserted_layers=upscale_layers - small_layers, zeroed_gains=len(zeroed), val_loss_before=round(before, 4),
            val_loss_after=round(after, 4), gain_lr_mult=INSERTED_GAIN_LR_MULT)
    log(event="start", phase=phase, params=n_params(model), layers=model.config.num_hidden_layers,
        max_steps=max_steps, minutes=minutes, batch_size=batch_size, seq_len=seq_len, peak_lr=peak_lr,
        train_tokens=int(sum(map(len, train_docs))))

    train = WindowSampler(flatten(train_docs), seq_len, seed + 100 * (phase - 1))

    gains = [p for n, p in model.named_parameters() if n in zeroed]
    decay = [p for n, p in model.named_parameters() if p.ndim >= 2]
    no_decay = [p for n, p in model.named_parameters() if p.ndim < 2 and n not in zeroed]
    groups = [{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}]
    if gains:
        groups.append({"params": gains, "weight_decay": 0.0, "lr_mult": INSERTED_GAIN_LR_MULT})
    opt = torch.optim.AdamW(groups, lr=peak_lr, betas=(0.9, 0.95), eps=1e-8)

    prog = Progress(max_steps, minutes)
    eval_every = 4 if quick else 25
    step, ema = 0, None
    model.train()
    while prog(step) < 1.0:
        lr = lr_at(prog(step), peak_lr, warmup_frac=0.04)
        for g in opt.param_groups:
            g["lr"] = lr * g.get("lr_mult", 1.0)
        x = train.batch(batch_size)
        loss = model(input_ids=x, labels=x).loss
        opt.zero_grad(set_to_none=True)
        loss.backward()
        gn = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        step += 1
        ema = loss.item() if ema is None else 0.95 * ema + 0.05 * loss.item()
        if step % eval_every == 0 or prog(step) >= 1.0:
            log(event="train", phase=phase, step=step, elapsed_s=round(prog.elapsed(), 1), lr=lr,
                loss=round(loss.item(), 4),
                loss_ema=round(ema, 4), grad_norm=round(float(gn), 3), val_loss=round(val_loss(), 4))
    final_val = val_loss()
    log(event="done", phase=phase, step=step, elapsed_s=round(prog.elapsed(), 1), loss_ema=ema, val_loss=final_val,
        tokens_seen=step * batch_size * seq_len)

    model.config.use_cache = True
    model.generation_config.bos_token_id = tokenizer.bos_token_id
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.eval()
    out_dir.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out_dir)
    store_weights(out_dir, storage)
    tokenizer.save_pretrained(out_dir)
    return model
