"""The compiled engine's own CPU kernel (``rows.cpp``: ``torch.ops.mtp_viz.rows``), built
with the machine's C++ compiler the first time it is needed and kept.

A decode step's products are a few rows times every weight matrix; ``rows`` reads each
row of W once for all of them, at the memory's speed, and gives each output the same value
whatever the number of rows (the file's header says how). It is built against the
installed torch with the compiler torch.compile already needs (``c++``, or ``$CXX``), once
per torch, compiler and source, into ``~/.cache/mtp-viz/kernels`` (``MTP_VIZ_KERNEL_DIR``),
in about half a minute; a process that cannot build it says why in one sentence
(:func:`note`) and the engine keeps inductor's own products.

``MTP_VIZ_KERNEL_ISA`` (``avx2``, ``avx512``, ``avx512bf16`` or ``amx``) caps the instruction set the
kernel uses below what the CPU has: the AVX2 path checked and timed on an AVX-512 machine.
"""
from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sysconfig
import tempfile
import threading
from pathlib import Path

ISAS = {"avx2": 1, "avx512": 2, "avx512bf16": 3, "amx": 4}   # the kernel's own numbering (rows.cpp)
MAX_ROWS = 16                                        # rows one call takes (a verification of 15 drafts)
SOURCE = Path(__file__).with_name("rows.cpp")
_lock = threading.Lock()
_state: dict = {}


def _cache_dir() -> Path:
    return Path(os.environ.get("MTP_VIZ_KERNEL_DIR") or Path.home() / ".cache" / "mtp-viz" / "kernels")


def _compiler() -> str | None:
    return os.environ.get("CXX") or shutil.which("c++") or shutil.which("g++")


def _build(cxx: str) -> Path:
    """The shared library for this torch, compiler and source (built now if it is not kept)."""
    import torch
    from torch.utils.cpp_extension import include_paths, library_paths
    version = subprocess.run([cxx, "--version"], capture_output=True, text=True, timeout=60).stdout
    key = hashlib.sha256(SOURCE.read_bytes() + torch.__version__.encode() + version.encode()).hexdigest()[:16]
    out = _cache_dir() / f"rows-{key}.so"
    if out.exists():
        return out
    out.parent.mkdir(parents=True, exist_ok=True)
    abi = int(torch._C._GLIBCXX_USE_CXX11_ABI)
    cmd = [cxx, "-O3", "-std=c++17", "-shared", "-fPIC", "-fopenmp", f"-D_GLIBCXX_USE_CXX11_ABI={abi}",
           *[f"-I{p}" for p in include_paths()], f"-I{sysconfig.get_paths()['include']}", str(SOURCE),
           *[f"-L{p}" for p in library_paths()], "-lc10", "-ltorch_cpu", "-o"]
    with tempfile.NamedTemporaryFile(dir=out.parent, suffix=".so", delete=False) as tmp:
        pass
    try:
        done = subprocess.run([*cmd, tmp.name], capture_output=True, text=True, timeout=600)
        if done.returncode:
            raise RuntimeError(done.stderr[-2000:])
        os.replace(tmp.name, out)   # whole or not at all: another process may be loading it
    finally:
        if os.path.exists(tmp.name):
            os.unlink(tmp.name)
    return out


def load() -> bool:
    """Whether ``torch.ops.mtp_viz.rows`` is there (built and loaded now if need be)."""
    with _lock:
        if "ok" not in _state:
            _state["ok"], _state["note"] = _load()
        return _state["ok"]


def _load() -> tuple[bool, str]:
    import torch
    if not (torch.backends.cpu.get_cpu_capability() or "").startswith("AVX"):
        return False, "The engine's own CPU kernel needs an x86-64 CPU with AVX2; inductor's products run instead."
    cxx = _compiler()
    if cxx is None:
        return False, "No C++ compiler was found for the engine's own CPU kernel; inductor's products run instead."
    try:
        torch.ops.load_library(str(_build(cxx)))
        _register_fake()
    except Exception as e:  # noqa: BLE001 - any failure to build is the fallback's sentence
        return False, (f"The engine's own CPU kernel could not be built ({type(e).__name__}); "
                      "inductor's products run instead.")
    return True, ""


def _register_fake() -> None:
    import torch

    @torch.library.register_fake("mtp_viz::rows")
    def _(x, w, scale, bias, isa):
        return x.new_empty((*x.shape[:-1], w.shape[0]))


def note() -> str:
    """"" where the kernel runs; else why not, in one sentence."""
    load()
    return _state["note"]


def isa() -> int:
    """The instruction set the kernel uses: the CPU's best, capped by ``MTP_VIZ_KERNEL_ISA``."""
    import torch
    if not load():
        return 0
    best = int(torch.ops.mtp_viz.best_isa())
    cap = os.environ.get("MTP_VIZ_KERNEL_ISA", "").strip().lower()
    return min(best, ISAS[cap]) if cap in ISAS else best


def isa_name(n: int | None = None) -> str:
    n = isa() if n is None else n
    return {v: k for k, v in ISAS.items()}.get(n, "none")


__all__ = ["ISAS", "MAX_ROWS", "isa", "isa_name", "load", "note"]
