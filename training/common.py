"""Shared helpers: seeding, token streams, LR schedule, logging."""

from __future__ import annotations

import json
import math
import random
import time
from pathlib import Path

import numpy as np
import torch


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def flatten(docs: list[list[int]]) -> torch.Tensor:
    return torch.tensor([t for d in docs for t in d], dtype=torch.long)


class WindowSampler:
    """Random fixed-length windows from a flat token stream, driven by a seeded generator."""

    def __init__(self, stream: torch.Tensor, seq_len: int, seed: int):
        self.stream = stream
        self.seq_len = seq_len
        self.gen = torch.Generator().manual_seed(seed)

    def batch(self, batch_size: int) -> torch.Tensor:
        hi = len(self.stream) - self.seq_len
        starts = torch.randint(0, hi, (batch_size,), generator=self.gen)
        return torch.stack([self.stream[s : s + self.seq_len] for s in starts.tolist()])

    def fixed(self, n: int, seed: int = 1234) -> torch.Tensor:
        g = torch.Generator().manual_seed(seed)
        hi = len(self.stream) - self.seq_len
        starts = torch.randint(0, hi, (n,), generator=g)
        return torch.stack([self.stream[s : s + self.seq_len] for s in starts.tolist()])


def lr_at(progress: float, peak: float, warmup_frac: float, min_ratio: float = 0.05) -> float:
    """Linear warmup then cosine decay, as a function of training progress in [0, 1]."""
    if progress < warmup_frac:
        return peak * progress / max(warmup_frac, 1e-9)
    p = (progress - warmup_frac) / max(1 - warmup_frac, 1e-9)
    return peak * (min_ratio + (1 - min_ratio) * 0.5 * (1 + math.cos(math.pi * min(p, 1.0))))


class Progress:
    """Training progress = max(step / max_steps, elapsed / time_budget): training ends at whichever
    comes first, and the cosine schedule always completes."""

    def __init__(self, max_steps: int, minutes: float):
        self.max_steps = max_steps
        self.budget = minutes * 60
        self.t0 = time.time()

    def elapsed(self) -> float:
        return time.time() - self.t0

    def __call__(self, step: int) -> float:
        return min(1.0, max(step / self.max_steps, self.elapsed() / self.budget if self.budget > 0 else 0))


class JsonlLog:
    def __init__(self, path: Path, append: bool = False):
        path.parent.mkdir(parents=True, exist_ok=True)
        self.f = open(path, "a" if append else "w")

    def __call__(self, **rec) -> None:
        self.f.write(json.dumps(rec) + "\n")
        self.f.flush()
        print(json.dumps(rec), flush=True)


def store_weights(folder: Path, storage: str = "bfloat16") -> None:
    """Rewrite `folder/model.safetensors` with its floating-point tensors in `storage` ("bfloat16" halves the
    bytes in git). config.json keeps dtype float32, so `from_pretrained` loads float32 weights holding exactly the
    stored values; training stages that read a saved model (the drafter, the evaluation) see what users get."""
    if storage == "float32":
        return
    from safetensors.torch import load_file, save_file

    dtype = {"bfloat16": torch.bfloat16}[storage]
    path = folder / "model.safetensors"
    sd = load_file(path)
    save_file({k: v.to(dtype) if v.is_floating_point() else v for k, v in sd.items()}, path, metadata={"format": "pt"})
