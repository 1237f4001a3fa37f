"""Hugging Face ZeroGPU: model work runs under ``spaces.GPU`` there, and nowhere else.

On ZeroGPU hardware a GPU is attached only while a function decorated with
``spaces.GPU`` runs. The generator of a comparison's runs is that function: the
worker thread iterates it as everywhere else. The duration asked for is estimated from the token
budget of the run. Without the ``spaces`` package, or with it on any other hardware,
:func:`on_gpu` returns the function unchanged.
"""
from __future__ import annotations

import importlib.util
from typing import Any, Callable, Iterable

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


def runs(pair: Any, prompt: str, kwargs: dict[str, dict]) -> Iterable[tuple[str, Any]]:
    """``(name, event)`` of the engine's runs of one prompt, one per entry of ``kwargs``
    (name -> ``pair.generate``'s keyword arguments), taking turns on this thread, each on
    its own clock (:mod:`mtp_viz.sources.interleave`; the pair says which: wall or CPU time).
    The function ZeroGPU runs on its GPU: one call, so a comparison holds one GPU for
    both of its modes."""
    from mtp_viz.sources.interleave import interleave
    now, basis = pair.own_time()
    yield from interleave({name: (lambda clock, kw=kw: pair.generate(prompt, clock=clock, **kw))
                           for name, kw in kwargs.items()}, now=now, basis=basis)


def on_gpu(fn: Callable = runs) -> Callable:
    """``fn`` under ``spaces.GPU`` on ZeroGPU, with a duration from the runs' token
    budget; ``fn`` itself elsewhere."""
    if not zero_gpu():
        return fn
    import spaces
    return spaces.GPU(duration=lambda pair, prompt, kwargs: duration(
        sum(kw.get("max_new_tokens", 64) for kw in kwargs.values())))(fn)
