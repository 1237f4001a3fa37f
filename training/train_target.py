"""Train the tiny Gemma 4 target (a Gemma4ForCausalLM) on stdlib source code."""

from __future__ import annotations

from pathlib import Path

import torch

from .common import JsonlLog, Progress, WindowSampler, flatten, lr_at, seed_everything
from .models import build_target, n_params


def train_target(tokenizer, train_docs, val_docs, out_dir: Path, log_dir: Path, *, quick: bool, seed: int,
                 max_steps: int, minutes: float, batch_size: int, seq_len: int, peak_lr: float,
                 init_from: Path | None = None, phase: int = 1):
    """Train from scratch, or (`init_from`) continue from a saved target with a fresh warmup + cosine phase."""
    seed_everything(seed + 100 * (phase - 1))
    if init_from is not None:
        from transformers import AutoModelForCausalLM

        model = AutoModelForCausalLM.from_pretrained(init_from)
    else:
        model = build_target(quick, vocab_size=len(tokenizer))
    model.config.use_cache = False
    log = JsonlLog(log_dir / "target_log.jsonl", append=phase > 1)
    log(event="start", phase=phase, params=n_params(model), max_steps=max_steps, minutes=minutes,
        batch_size=batch_size, seq_len=seq_len, peak_lr=peak_lr, train_tokens=int(sum(map(len, train_docs))))

    train = WindowSampler(flatten(train_docs), seq_len, seed + 100 * (phase - 1))
    val_batch = WindowSampler(flatten(val_docs), seq_len, seed).fixed(4 if quick else 32)

    decay = [p for n, p in model.named_parameters() if p.ndim >= 2]
    no_decay = [p for n, p in model.named_parameters() if p.ndim < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}],
                            lr=peak_lr, betas=(0.9, 0.95), eps=1e-8)

    @torch.no_grad()
    def val_loss() -> float:
        model.eval()
        losses = [model(input_ids=b, labels=b).loss.item() for b in val_batch.split(8)]
        model.train()
        return sum(losses) / len(losses)

    prog = Progress(max_steps, minutes)
    eval_every = 4 if quick else 25
    step, ema = 0, None
    model.train()
    while prog(step) < 1.0:
        lr = lr_at(prog(step), peak_lr, warmup_frac=0.04)
        for g in opt.param_groups:
            g["lr"] = lr
        x = train.batch(batch_size)
        loss = model(input_ids=x, labels=x).loss
        opt.zero_grad(set_to_none=True)
        loss.backward()
        gn = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        step += 1
        ema = loss.item() if ema is None else 0.95 * ema + 0.05 * loss.item()
        if step % eval_every == 0 or prog(step) >= 1.0:
            log(event="train", phase=phase, step=step, elapsed_s=round(prog.elapsed(), 1), lr=lr, loss=round(loss.item(), 4),
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
    tokenizer.save_pretrained(out_dir)
    return model
