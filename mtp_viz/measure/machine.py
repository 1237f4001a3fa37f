"""Where a study ran, in one line: CPU model, ISA, whether it computes bfloat16 natively,
cores and threads, BLAS, versions, load.

Machines of one kind differ in CPU from day to day, and the same engine's speed moves
several-fold with the CPU (``docs/compiled.md``), so every study carries this line
(``bench.json``'s and ``profile.json``'s ``meta.machine``, their markdown's header).
Read from ``/proc/cpuinfo``, ``os.getloadavg`` and ``torch.__config__.show()``; a field a
platform does not expose is left out, never guessed. Native bfloat16 is
:func:`mtp_viz.sources.precision.native_bfloat16`'s answer (capped as the engine's kernel
is, by ``MTP_VIZ_KERNEL_ISA``), so a study says which precision is fastest where it ran.
"""
from __future__ import annotations

import os
import platform
import re
from pathlib import Path
from typing import Any

ISA = ("avx2", "avx512f", "avx512_bf16", "avx512_vnni", "amx_tile", "amx_bf16", "neon", "asimd", "sve")


def _cpuinfo() -> dict[str, str]:
    try:
        text = Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return {}
    out: dict[str, str] = {}
    for line in text.splitlines():
        key, _, value = line.partition(":")
        key = key.strip().lower()
        if key in ("model name", "flags", "features") and key not in out:
            out[key] = value.strip()
    return out


def _blas(config: str) -> dict[str, str]:
    """BLAS and oneDNN as torch was built with them (``torch.__config__.show()``)."""
    found = {}
    blas = re.search(r"BLAS_INFO=(\w+)", config)
    if blas:
        found["blas"] = blas.group(1)
    mkl = re.search(r"Intel\(R\) (?:oneAPI )?Math Kernel Library Version ([\w.]+)", config)
    if mkl:
        found["mkl"] = mkl.group(1)
    dnn = re.search(r"(?:oneDNN|MKL-DNN) v([\w.]+)", config)
    if dnn:
        found["onednn"] = dnn.group(1)
    return found


def machine() -> dict[str, Any]:
    """The fields of the line (JSON-ready)."""
    import torch
    import transformers

    from mtp_viz.sources import precision
    info = _cpuinfo()
    flags = set((info.get("flags") or info.get("features") or "").split())
    try:
        load = round(os.getloadavg()[0], 2)
    except OSError:
        load = None
    return {"cpu": info.get("model name") or platform.processor() or platform.machine(),
            "isa": [f for f in ISA if f in flags], "native_bfloat16": precision.native_bfloat16("cpu"),
            "kernel_isa": precision.ISA_NAMES[precision.cpu_isa()], "cores": os.cpu_count(),
            "torch_threads": torch.get_num_threads(),
            **_blas(torch.__config__.show()), "torch": torch.__version__, "transformers": transformers.__version__,
            "python": platform.python_version(), "load": load,
            "cuda": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None}


def line(m: dict[str, Any]) -> str:
    """``AMD EPYC (avx2, avx512f, avx512_bf16), native bfloat16 (AVX-512 BF16), 2 cores, 1 torch
    thread, BLAS mkl 2024.2, oneDNN 3.12, torch 2.13.0, transformers 5.24.0, load 0.1``."""
    isa = f" ({', '.join(m['isa'])})" if m.get("isa") else ""
    threads = m.get("torch_threads")
    parts = [f"{m.get('cpu', '?')}{isa}"]
    if m.get("native_bfloat16") is not None:
        parts.append(f"{'native' if m['native_bfloat16'] else 'no native'} bfloat16 ({m.get('kernel_isa', '?')})")
    parts += [f"{m.get('cores')} cores",
             f"{threads} torch thread{'s' if threads != 1 else ''}"]
    if m.get("blas"):
        parts.append(f"BLAS {m['blas']}" + (f" {m['mkl']}" if m.get("mkl") else ""))
    if m.get("onednn"):
        parts.append(f"oneDNN {m['onednn']}")
    parts += [f"torch {m.get('torch')}", f"transformers {m.get('transformers')}"]
    if m.get("cuda"):
        parts.append(f"GPU {m['cuda']}")
    if m.get("load") is not None:
        parts.append(f"load {m['load']}")
    return ", ".join(parts)


__all__ = ["line", "machine"]
