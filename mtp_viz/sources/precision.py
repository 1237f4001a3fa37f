"""Each model's precision: a float dtype, or integer weights through transformers' own
quantization configs.

    float32, bfloat16, float16   the model's dtype: ``from_pretrained(dtype=...)``
    int8                         ``quantization_config=TorchAoConfig(Int8WeightOnlyConfig())``:
                                 every linear layer's weight in int8 with one scale per row,
                                 and then the output head too (:func:`int8_head`), as
                                 llama.cpp's q8_0 has it; embeddings, norms and the arithmetic
                                 stay in the device's default dtype (float32 on a CPU,
                                 bfloat16 on a GPU)
    int4                         ``TorchAoConfig(Int4WeightOnlyConfig())``: linear weights in
                                 4 bits, groups of 128 sharing a scale, bfloat16 arithmetic

A precision is a setting of each model (``--target-precision``, ``--drafter-precision``;
``--dtype`` sets both). Names are checked without torch (the app's form reads them);
the load arguments, the kernel check and reading a loaded model's precision import torch
and torchao only when called. :func:`fastest` says which precision is fastest on the
machine and why, in one sentence: bfloat16 where the CPU computes it natively (AVX-512 BF16
or AMX), else int8 weight-only (computing in float32) where torchao is installed, else
float32. Whether a precision runs is asked of the device itself (:func:`check_runs`: one
small layer in it, quantized and run), so a precision without a kernel there is one
sentence before any weights load, not a conversion error mid-load.
"""
from __future__ import annotations

import importlib.util
import os
import re
import sys
from dataclasses import dataclass
from typing import Any

from mtp_viz.errors import UserError, clip

PRECISIONS = ("float32", "bfloat16", "float16", "int8", "int4")
ALIASES = {"fp32": "float32", "bf16": "bfloat16", "fp16": "float16", "half": "float16"}
BITS = {"int8": 8, "int4": 4}          # bits per weight of a quantized linear layer
INT4_GROUP = 128                        # weights sharing one int4 scale (torchao's default)
# int4 packings to try, in order, on devices that have a kernel for them: "plain" needs the
# mslk kernels (CUDA), "tile_packed_to_4d" torch's own CUDA int4 matmul (bfloat16 only)
INT4_FORMATS = ("plain", "tile_packed_to_4d")
CHOICES = "float32, bfloat16, float16, int8 or int4"


def precision_name(value: Any, setting: str = "precision") -> str | None:
    """The precision a user asked for (``--target-precision``, ``--dtype``,
    ``MTP_VIZ_DTYPE``, the page's field), by its full name; None for none (the device's
    default); one sentence naming ``setting`` for anything else."""
    if value is None or not str(value).strip() or str(value).strip().lower() in ("auto", "default"):
        return None
    name = str(value).strip().lower()
    name = ALIASES.get(name, name)
    if name not in PRECISIONS:
        raise UserError(f"Unknown {setting} {clip(repr(value), 40)}; use {CHOICES}.")
    return name


def default_precision(device: str) -> str:
    """bfloat16 on accelerators, float32 on a CPU (bf16 matmuls are slow on most CPUs,
    but float32 takes twice the memory: :mod:`.memory`)."""
    return "float32" if device == "cpu" else "bfloat16"


@dataclass(frozen=True)
class Precision:
    """The precisions of a pair's two models; None is the device's default."""
    target: str | None = None
    drafter: str | None = None

    @classmethod
    def of(cls, dtype: Any = None, target: Any = None, drafter: Any = None) -> "Precision":
        """From the user's settings: ``dtype`` for both models, ``target``/``drafter`` for
        one (they win over ``dtype``); each name checked."""
        both = precision_name(dtype, "dtype")
        return cls(precision_name(target, "target precision") or both,
                   precision_name(drafter, "drafter precision") or both)

    @classmethod
    def parse(cls, pair: str) -> "Precision":
        """``"T/D"`` (``--precisions``' items): the target's precision, then the drafter's."""
        parts = [p.strip() for p in str(pair).split("/")]
        if len(parts) != 2 or not all(parts):
            raise UserError(f"A precision pair is target/drafter, like float32/int8, not {clip(repr(pair), 40)}.")
        return cls(precision_name(parts[0], "target precision"), precision_name(parts[1], "drafter precision"))

    def resolved(self, device: str) -> "Precision":
        """The same with the device's default in place of None."""
        return Precision(self.target or default_precision(device), self.drafter or default_precision(device))

    @property
    def label(self) -> str:
        return f"{self.target or 'default'}/{self.drafter or 'default'}"


def compute_dtype(precision: str | None, device: str):
    """The torch dtype a model in ``precision`` computes in (and keeps its unquantized
    weights in)."""
    import torch
    precision = precision or default_precision(device)
    if precision == "int4":
        return torch.bfloat16  # every int4 kernel torchao has takes bfloat16
    if precision in BITS:
        precision = default_precision(device)
    return getattr(torch, precision)


def _torchao(precision: str):
    """torchao's quantization module, or one sentence saying it is missing."""
    try:
        import torchao.quantization as quantization
    except ImportError:
        raise UserError(f"{precision} needs the torchao package, which is not installed: "
                        "pip install torchao (or mtp-viz[quant]).") from None
    return quantization


def _quant_types(precision: str) -> list:
    """torchao configs for ``precision``, the first one the device can run first to be tried."""
    q = _torchao(precision)
    if precision == "int8":
        return [q.Int8WeightOnlyConfig()]
    return [q.Int4WeightOnlyConfig(group_size=INT4_GROUP, int4_packing_format=f) for f in INT4_FORMATS]


def _runs(quant_type, dtype, device: str) -> bool:
    """Whether one small linear layer quantized by ``quant_type`` runs on ``device``."""
    import torch
    try:
        layer = torch.nn.Linear(256, 256, bias=False, device=device, dtype=dtype)
        if quant_type is not None:
            from torchao.quantization import quantize_
            quantize_(layer, quant_type)
        with torch.inference_mode():
            layer(torch.ones(2, 256, device=device, dtype=dtype))
        return True
    except Exception:  # noqa: BLE001 - no kernel, whatever the library raises for it
        return False


def _where(device: str) -> str:
    return "this CPU" if device == "cpu" else f"the {device} device"


def quant_type(precision: str | None, device: str):
    """The torchao config ``precision`` loads with on ``device`` (None for a float
    dtype), checked to run there; one sentence when it cannot. (A device where not even
    float32 runs is left to the load, which names the real problem.)"""
    import torch
    precision = precision or default_precision(device)
    dtype = compute_dtype(precision, device)
    if device.startswith("cuda") and "spaces" in sys.modules and not torch.cuda.is_initialized():
        # ZeroGPU: no GPU is attached outside spaces.GPU, and CUDA must stay uninitialised
        # (as in .memory): nothing can be asked, so the load itself says what fails
        return _quant_types(precision)[0] if precision in BITS else None
    if precision not in BITS:
        if precision != "float32" and not _runs(None, dtype, device) and _runs(None, torch.float32, device):
            raise UserError(f"{precision} has no kernel on {_where(device)}; use {_others(precision)}.")
        return None
    for candidate in _quant_types(precision):
        if _runs(candidate, dtype, device):
            return candidate
    why = (f" (torchao {_version()}'s int4 weight-only layouts need a CUDA GPU)"
           if precision == "int4" and device == "cpu" else "")
    raise UserError(f"{precision} has no kernel on {_where(device)}{why}; use {_others(precision)}.")


def _others(precision: str) -> str:
    """The precisions to suggest instead of one that does not run."""
    others = [p for p in ("int8", "bfloat16", "float32") if p != precision]
    return ", ".join(others[:-1]) + " or " + others[-1]


def _version() -> str:
    try:
        import torchao
        return str(torchao.__version__).split("+")[0]
    except ImportError:
        return "?"


def check_runs(precision: str | None, device: str) -> None:
    """One sentence unless ``precision`` runs on ``device`` (see :func:`quant_type`)."""
    quant_type(precision, device)


def load_kwargs(precision: str | None, device: str) -> dict[str, Any]:
    """What ``from_pretrained`` takes to load a model in ``precision`` on ``device``."""
    kwargs: dict[str, Any] = {"dtype": compute_dtype(precision, device)}
    q = quant_type(precision, device)
    if q is not None:
        from transformers import TorchAoConfig
        kwargs["quantization_config"] = TorchAoConfig(quant_type=q)
    return kwargs


def int8_head(model, precision: str | None) -> None:
    """In int8, the output head in int8 too, one scale per row, like every other linear layer.
    ``TorchAoConfig`` leaves the head as it is (transformers keeps tied weights out of
    quantization), but a decode step reads all of it: E2B's head is 262,144 × 1,536 weights,
    1.6 GB in float32 against 0.4 GB in int8, a third of what an int8 step reads. The head is
    quantized on its own (``quantize_`` gives it a new weight), which unties it from the input
    embedding: the lookup keeps its float table (a token reads one row of it). Greedy decoding in
    int8 is then lossless against plain decoding of this same model, which is what is compared.
    A Gemma 4 assistant with a clustered head (``masked_embedding``) keeps its head: it gathers
    the rows of its few chosen clusters from the weight itself, and reads no more of it a step."""
    if precision != "int8" or getattr(model, "masked_embedding", None) is not None:
        return
    import torch
    head = model.get_output_embeddings()
    if type(head) is torch.nn.Linear and type(head.weight) is torch.nn.Parameter:
        from torchao.quantization import quantize_
        quantize_(head, _quant_types("int8")[0])


def check_loaded(model, precision: str | None, device: str, name: str) -> None:
    """One sentence unless every parameter of a model just loaded is in ``precision``'s
    compute dtype (a quantized weight reports the dtype it computes in). A load that
    raced another build in the process would fail here, not run in the wrong precision."""
    dtype = compute_dtype(precision, device)
    params = list(model.parameters())
    wrong = sum(p.dtype != dtype for p in params)
    if wrong:
        raise UserError(f"{clip(name)} did not load in {precision or default_precision(device)}: {wrong} of "
                        f"{len(params)} parameters came out in another dtype, so it was not used.")


def precision_of(model) -> str:
    """What a loaded model runs in, read from the model itself: its quantization
    config's kind (``int8``, ``int4``, ``nf4``, ...) or its dtype's name. Works on models
    mtp-viz did not load (:func:`mtp_viz.sources.models.from_models`)."""
    qc = getattr(getattr(model, "config", None), "quantization_config", None)
    if qc is not None:
        return _quantized_kind(qc.to_dict() if hasattr(qc, "to_dict") else dict(qc), qc)
    for module in model.modules():  # torchao applied by hand: its tensor subclass says it
        weight = getattr(module, "weight", None)
        m = re.match(r"Int(\d)", type(weight).__name__) if weight is not None else None
        if m:
            return f"int{m.group(1)}"
    return str(getattr(model, "dtype", "")).removeprefix("torch.") or "unknown"


def _quantized_kind(d: dict, qc) -> str:
    method = str(d.get("quant_method", "")).split(".")[-1].lower()
    if method == "torchao":
        name = type(getattr(qc, "quant_type", None)).__name__
        if name in ("NoneType", "str", "dict"):
            name = str(d.get("quant_type", ""))
        bits = re.search(r"(\d)weight", name.lower())
        kind = f"int{bits.group(1)}" if bits else name or "torchao"
        return kind + (" (dynamic activations)" if "DynamicActivation" in name else "")
    if method == "bitsandbytes":
        return d.get("bnb_4bit_quant_type", "int4") if d.get("load_in_4bit") else "int8"
    bits = d.get("bits") or d.get("w_bit")
    return f"{method} int{bits}" if bits else method or "quantized"


# The CPU's instruction set as the engine's own kernel numbers it (mtp_viz.engine.kernels.ISAS)
ISA_NAMES = {0: "no AVX2", 1: "AVX2", 2: "AVX-512", 3: "AVX-512 BF16", 4: "AMX"}
NATIVE_BFLOAT16_ISA = 3                 # AVX-512 BF16 and AMX compute bfloat16; below, it is widened
ATEN_CAPS = {"default": 0, "avx2": 1}   # ATEN_CPU_CAPABILITY's caps below AVX-512


def _flags() -> set[str]:
    """The CPU's flags as Linux reports them (``/proc/cpuinfo``), else as torch reads them."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                if line.startswith("flags"):
                    return set(line.partition(":")[2].split())
    except OSError:
        pass
    import torch
    c = torch.cpu
    found = {"avx2": c._is_avx2_supported(), "fma": c._is_avx2_supported(), "avx512f": c._is_avx512_supported(),
             "avx512bw": c._is_avx512_supported(), "avx512vl": c._is_avx512_supported(),
             "avx512_bf16": c._is_avx512_bf16_supported(), "amx_tile": c._is_amx_tile_supported(),
             "amx_bf16": c._is_amx_tile_supported()}
    return {k for k, v in found.items() if v}


def _kernel_loaded() -> bool:
    """Whether the engine's own CPU kernel is loaded in this process (never built here)."""
    if "torch" not in sys.modules:
        return False
    import torch
    try:
        return hasattr(torch.ops.mtp_viz, "best_isa")
    except Exception:  # noqa: BLE001 - an op namespace torch cannot read is one that is not loaded
        return False


def cpu_isa() -> int:
    """The CPU's instruction set, numbered as the engine's own kernel numbers it (1 AVX2,
    2 AVX-512, 3 AVX-512 BF16, 4 AMX; 0 none of them): the kernel's own answer where it is
    loaded, else the same cpuid bits read from the CPU's flags (nothing built, torch not
    needed on Linux); capped by ``MTP_VIZ_KERNEL_ISA`` as the kernel is, and by
    ``ATEN_CPU_CAPABILITY`` (``avx2``, ``default``) as torch is: how a machine without
    native bfloat16 is imitated on one that has it."""
    from mtp_viz.engine import kernels
    if _kernel_loaded():
        best = kernels.isa()
    else:
        f = _flags()
        best = (0 if not {"avx2", "fma"} <= f else 1 if not {"avx512f", "avx512bw", "avx512vl"} <= f
                else 2 if "avx512_bf16" not in f else 4 if {"amx_tile", "amx_bf16"} <= f else 3)
        cap = os.environ.get("MTP_VIZ_KERNEL_ISA", "").strip().lower()
        best = min(best, kernels.ISAS.get(cap, best))
    return min(best, ATEN_CAPS.get(os.environ.get("ATEN_CPU_CAPABILITY", "").strip().lower(), best))


def native_bfloat16(device: str) -> bool:
    """Whether ``device`` computes bfloat16 natively: every accelerator mtp-viz runs on; a
    CPU with AVX-512 BF16 or AMX (:func:`cpu_isa`)."""
    return device != "cpu" or cpu_isa() >= NATIVE_BFLOAT16_ISA


@dataclass(frozen=True)
class Fastest:
    """The precision fastest on a device, and the one sentence that says why."""
    precision: str
    native_bfloat16: bool
    why: str


def fastest(device: str) -> Fastest:
    """bfloat16 where ``device`` computes it natively; on a CPU that does not, int8
    weight-only (one byte a weight read, float32 arithmetic) where torchao is installed,
    else float32 (a plain step reads every weight once: the fewest bytes win)."""
    if device != "cpu":
        return Fastest("bfloat16", True, f"The {device} device computes bfloat16 natively.")
    isa = cpu_isa()
    if isa >= NATIVE_BFLOAT16_ISA:
        return Fastest("bfloat16", True, f"This CPU computes bfloat16 natively ({ISA_NAMES[isa]}).")
    no = (f"This CPU has no native bfloat16 ({ISA_NAMES[isa]}): bfloat16 weights are widened to float32 as "
          "they are read, and ")
    if importlib.util.find_spec("torchao") is not None:
        return Fastest("int8", False, no + "int8 weight-only (computing in float32) is the fastest precision here.")
    return Fastest("float32", False, no + "float32 is the fastest precision here without torchao (int8 "
                   "weight-only would be faster: pip install torchao).")


__all__ = ["BITS", "CHOICES", "Fastest", "INT4_GROUP", "PRECISIONS", "Precision", "check_loaded", "check_runs",
           "compute_dtype", "cpu_isa", "default_precision", "fastest", "int8_head", "load_kwargs", "native_bfloat16",
           "precision_name", "precision_of", "quant_type"]
