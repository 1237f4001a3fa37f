"""Will a pair fit? Its weights' size from the configs alone, against the memory free now.

    weights = Σ parameters × bytes per element (bfloat16/float16: 2, float32: 4)

and in int8 or int4 (:mod:`.precision`), the weights of the linear layers that
transformers' torchao quantizer converts count bits/8 bytes each plus their scales and
zero points (int8: one of each per row; int4: per group of 128), everything else (the
embeddings, the norms, the output layer) the bytes of the dtype it computes in.

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


def weight_bytes(config, dtype, bits: int | None = None) -> int:
    """Bytes of the model's parameters in ``dtype`` (a torch dtype), from its config;
    with ``bits`` (8 or 4), its quantizable linear weights at that many bits each."""
    import torch
    from transformers import AutoModelForCausalLM

    from mtp_viz.engine.build import building
    with building(), torch.device("meta"):  # a build too: it sets process-wide state (engine.build)
        model = AutoModelForCausalLM.from_config(config, trust_remote_code=False)
    # parameters() yields a tied weight (embedding = lm_head) once, as it is stored once
    total = sum(p.numel() for p in model.parameters()) * dtype.itemsize
    for weight in (_quantized_weights(model) if bits else ()):
        total += _quantized_bytes(weight, bits, dtype) - weight.numel() * dtype.itemsize
    head = model.get_output_embeddings()
    if bits == 8 and type(head) is torch.nn.Linear and getattr(model, "masked_embedding", None) is None:
        # precision.int8_head: an int8 copy beside the lookup's table
        total += _quantized_bytes(head.weight, bits, dtype)
    return total


def _quantized_bytes(weight, bits: int, dtype=None) -> int:
    """Bytes of ``weight`` quantized to ``bits``: int8 adds a scale (``dtype``) and an int8 zero
    point per row; int4 a scale and a zero point (``dtype``) per group of 128."""
    itemsize = (dtype or weight.dtype).itemsize
    rows, n = weight.shape[0], weight.numel()
    extra = rows * (itemsize + 1) if bits == 8 else 2 * -(-n // 128) * itemsize
    return n * bits // 8 + extra


def _quantized_weights(model) -> list:
    """The weights transformers' torchao quantizer converts: every ``nn.Linear``'s, but
    for the modules it keeps as they are (the output layer, tied weights, the last one)."""
    import torch
    from transformers.quantizers.base import get_keys_to_not_convert
    from transformers.quantizers.quantizers_utils import should_convert_module
    skip = get_keys_to_not_convert(model) + list(getattr(model, "_keep_in_fp32_modules", None) or [])
    return [m.weight for name, m in model.named_modules()
            if isinstance(m, torch.nn.Linear) and should_convert_module(f"{name}.weight", skip)]


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


def check_fits(name: str, models, device: str) -> int | None:
    """The weight bytes of a target's config and its drafter's, each in its precision
    (``models``: (config or None, precision name) pairs); one sentence if they exceed the
    memory free on ``device``. None, and no check, for pre-quantized checkpoints (their
    weights are not sized by the precision asked) and for configs no causal-LM class
    builds (loading them fails with its own sentence)."""
    from .precision import BITS, compute_dtype
    models = [(c, p) for c, p in models if c is not None]
    if any(getattr(c, "quantization_config", None) for c, _ in models):
        return None
    try:
        need = sum(weight_bytes(c, compute_dtype(p, device), BITS.get(p)) for c, p in models)
    except (ValueError, KeyError, TypeError, AttributeError):  # an unbuildable config: from_pretrained explains it
        return None
    free = available_bytes(device)
    if free is not None and need > free:
        kinds = list(dict.fromkeys(p for _, p in models))
        kind = kinds[0] if len(kinds) == 1 else f"{kinds[0]} (target) and {kinds[1]} (drafter)"
        where = "this machine has" if device == "cpu" else f"the {device} device has"
        bigger = "a GPU" if device == "cpu" else "a GPU with more memory"
        wide = any(compute_dtype(p, device).itemsize > 2 and p not in BITS for _, p in models)
        advice = f"try {'dtype bfloat16' if wide else 'a smaller model'}, {bigger}, or the tiny pair"
        who = clip(name) + (" with its drafter" if len(models) > 1 else "")
        raise UserError(f"{who} needs about {size(need)} in {kind} but {where} {size(free)} available; "
                        f"{advice}.")
    return need


__all__ = ["available_bytes", "check_fits", "cpu_available", "size", "weight_bytes"]
