"""Hugging Face ZeroGPU: model work runs under ``spaces.GPU`` there, and nowhere else.

On ZeroGPU hardware a GPU is attached only while a function decorated with
``spaces.GPU`` runs. The generator of a comparison's runs
(:func:`mtp_viz.sources.local.runs`) is that function: the worker thread iterates it as
everywhere else. The duration asked for is estimated from the token
budget of the run. Without the ``spaces`` package, or with it on any other hardware,
:func:`on_gpu` returns the function unchanged.
"""
from __future__ import annotations

import importlib.util
from typing import Callable

BASE_SECONDS = 15          # loading onto the GPU and the prefill
SECONDS_PER_TOKEN = 0.08   # a generous bound for one decoding step of the largest preset
MAX_SECONDS = 120          # what a ZeroGPU visitor may ask for at most


def zero_gpu() -> bool:
    """Whether this process runs on ZeroGPU hardware (the ``spaces`` package says so)."""
    if importlib.util.find_spec("spaces") is None:
        return False
    import spaces.config
    return bool(spaces.config.Config.zero_gpu)


def duration(max_new_tokens: int) -> int:
    """Seconds of GPU to ask for one run of up to ``max_new_tokens`` tokens."""
    return int(min(MAX_SECONDS, BASE_SECONDS + SECONDS_PER_TOKEN * max(1, max_new_tokens)))


def on_gpu(fn: Callable | None = None) -> Callable:
    """``fn`` (default: the local source's :func:`mtp_viz.sources.local.runs`) under
    ``spaces.GPU`` on ZeroGPU, with a duration from the runs' token budget; ``fn``
    itself elsewhere."""
    from mtp_viz.sources.local import runs
    fn = fn or runs
    if not zero_gpu():
        return fn
    import spaces
    return spaces.GPU(duration=lambda pair, s, *rest: duration(len(s.modes) * s.max_new_tokens))(fn)
