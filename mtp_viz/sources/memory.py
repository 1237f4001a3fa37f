"""Will a pair fit? Its weights' size from the configs alone, against the memory free now.

    weights = Σ parameters × bytes per element (bfloat16/float16: 2, float32: 4)

The parameters are counted on torch's ``meta`` device, which gives every tensor a shape
and no storage: the model is built exactly as ``from_pretrained`` would build it
(towers, experts, tied weights counted once) and nothing is allocated or downloaded
beyond the config. That is a floor: the KV cache and activations come on top, so a
pair refused here would not have fitted without swapping. Sizes are in decimal GB (10⁹
bytes).

Free memory: on a CPU, the kernel's ``MemAvailable`` (what can be allocated without
swapping), lowered to what a container's cgroup limit leaves; on CUDA, the device's
free bytes (``torch.cuda.mem_get_info``). Elsewhere (MPS) it is unknown and nothing is
checked.
"""
from __future__ import annotations

import sys
from pathlib import Path

from mtp_viz.errors import UserError, clip

GB = 1e9
MEMINFO = "/proc/meminfo"
# cgroup v2, then v1: (limit, usage, the memory.stat key of reclaimable page cache)
CGROUPS = (("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory.current", "inactive_file"),
           ("/sys/fs/cgroup/memory/memory.limit_in_bytes", "/sys/fs/cgroup/memory/memory.usage_in_bytes",
            "total_inactive_file"))


def size(n: float) -> str:
    """Bytes for a sentence: GB (10⁹) with one decimal, MB below one GB."""
    return f"{n / GB:.1f} GB" if n >= GB else f"{n / 1e6:.1f} MB"


def weight_bytes(config, dtype) -> int:
    """Bytes of the model's parameters in ``dtype`` (a torch dtype), from its config."""
    import torch
    from transformers import AutoModelForCausalLM
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config, trust_remote_code=False)
    # parameters() yields a tied weight (embedding = lm_head) once, as it is stored once
    return sum(p.numel() for p in model.parameters()) * dtype.itemsize


def _read(path: str) -> str | None:
    try:
        return Path(path).read_text(encoding="ascii")
    except (OSError, UnicodeDecodeError):
        return None


def _field(text: str | None, key: str) -> int | None:
    """The number after ``key`` in /proc/meminfo or memory.stat lines (``key: n`` or ``key n``)."""
    for line in (text or "").splitlines():
        parts = line.replace(":", " ").split()
        if len(parts) >= 2 and parts[0] == key and parts[1].isdigit():
            return int(parts[1])
    return None


def _cgroup_free() -> int | None:
    """What a cgroup memory limit leaves: limit − (usage − reclaimable page cache)."""
    for limit_path, usage_path, cache_key in CGROUPS:
        limit, usage = (_read(limit_path) or "").strip(), (_read(usage_path) or "").strip()
        if limit.isdigit() and usage.isdigit() and int(limit) < 2 ** 60:  # "max" / 2⁶³ − page: no limit
            cache = _field(_read(str(Path(limit_path).parent / "memory.stat")), cache_key) or 0
            return max(0, int(limit) - (int(usage) - cache))
    return None


def cpu_available() -> int | None:
    """Bytes this process can still allocate on the CPU without swapping, or None."""
    kib = _field(_read(MEMINFO), "MemAvailable")  # in kB, which the kernel means as KiB
    free = [b for b in (kib * 1024 if kib is not None else None, _cgroup_free()) if b is not None]
    return min(free) if free else None


def available_bytes(device: str) -> int | None:
    """Free memory on ``device`` ("cpu", "cuda", "cuda:1", ...), or None where unknown."""
    if device.startswith("cuda"):
        import torch
        if "spaces" in sys.modules and not torch.cuda.is_initialized():
            return None  # ZeroGPU: no GPU is attached outside spaces.GPU, and CUDA must stay uninitialised
        try:
            return int(torch.cuda.mem_get_info(torch.device(device))[0])
        except (RuntimeError, AssertionError, ValueError):  # no usable device by that name: loading says so
            return None
    return cpu_available() if device == "cpu" else None


def check_fits(name: str, configs, dtype, device: str) -> int | None:
    """The weight bytes in ``dtype`` of a target's config and its drafter's (or None);
    one sentence if they exceed the memory free on ``device``. None, and no check, for
    pre-quantized checkpoints (their weights are not ``dtype``-sized) and for configs
    no causal-LM class builds (loading them fails with its own sentence)."""
    configs = [c for c in configs if c is not None]
    if any(getattr(c, "quantization_config", None) for c in configs):
        return None
    try:
        need = sum(weight_bytes(c, dtype) for c in configs)
    except (ValueError, KeyError, TypeError, AttributeError):  # an unbuildable config: from_pretrained explains it
        return None
    free = available_bytes(device)
    if free is not None and need > free:
        kind = str(dtype).removeprefix("torch.")
        where = "this machine has" if device == "cpu" else f"the {device} device has"
        bigger = "a GPU" if device == "cpu" else "a GPU with more memory"
        advice = f"try {'dtype bfloat16' if dtype.itemsize > 2 else 'a smaller model'}, {bigger}, or the tiny pair"
        who = clip(name) + (" with its drafter" if len(configs) > 1 else "")
        raise UserError(f"{who} needs about {size(need)} in {kind} but {where} {size(free)} available; "
                        f"{advice}.")
    return need


__all__ = ["available_bytes", "check_fits", "cpu_available", "size", "weight_bytes"]
