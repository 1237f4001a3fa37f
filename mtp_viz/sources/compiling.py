"""A loaded pair put on the compiled engine (:mod:`mtp_viz.engine.compiled`): its target
and MTP draft step compiled and warmed by a short run of each mode, timed into
``pair.compile_seconds``; or, where it cannot compile, the one sentence saying why it
decodes eagerly (``pair.compile_note``). :meth:`ModelPair.compile` and
``load_pair(compile=True)`` come here; the pair only holds what it produced."""
from __future__ import annotations

import dataclasses
import time
from typing import Any


def compile_pair(pair: Any, mode: str | None = None) -> str:
    """Switch ``pair`` to the compiled engine; later shapes compile on first use, off the
    run's clock. ``mode``: torch.compile's (``"reduce-overhead"``: CUDA graphs, on a GPU)."""
    from mtp_viz.engine.build import building
    with building():  # never beside a load: tracing reads the default dtype a load sets
        return _compile(pair, mode)


def compiled_twin(pair: Any, mode: str | None = None) -> Any:
    """The same models as a pair of their own on the compiled engine (``pair`` stays
    eager; nothing is copied), compiled now: what the bench compares against it."""
    from mtp_viz.engine.schedules import ScheduleCache
    other = dataclasses.replace(pair, schedules=ScheduleCache(), fast=None, draft_step=None)
    compile_pair(other, mode)
    return other


def _compile(pair: Any, mode: str | None) -> str:
    from mtp_viz.engine import compiled, loop
    pair.compile_note = compiled.compile_support(pair.target)
    if pair.compile_note:
        return pair.compile_note
    t = time.perf_counter()
    pair.fast = compiled.FastTarget(pair.target, mode=mode)
    if pair.has_mtp:
        pair.draft_step = compiled.FastDraftStep(pair.drafter_model, pair.fast.window, mode=mode)
    ids = [int(pair.eos_token_ids[0]) + 1 if pair.eos_token_ids else 2] * 8  # any tokens: shapes matter
    for _ in loop.autoregressive(pair.fast, ids, max_new_tokens=3):
        pass
    d = pair.make_drafter("auto")
    for _ in loop.speculative(pair.fast, d, ids, max_new_tokens=2 * d.default_draft_tokens + 2):
        pass
    pair.compile_seconds = time.perf_counter() - t
    pair.compile_note = pair.fast.note or (pair.draft_step.note if pair.draft_step is not None else "")
    if pair.fast.note:
        pair.fast = pair.draft_step = None
    elif pair.draft_step is not None and pair.draft_step.note:
        pair.draft_step = None
    return pair.compile_note


__all__ = ["compile_pair", "compiled_twin"]
