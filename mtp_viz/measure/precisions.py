"""Each precision's plain step, side by side: ``mtp-viz profile --precisions bfloat16,int8,float32``.

For each precision in turn the pair is loaded in it (the target and its drafter alike,
by the caller's ``load``), its per-forward costs are timed by :func:`mtp_viz.measure.profile.costs`
at the widths a verification of γ drafts uses (1 .. γ + 1) on the eager engine and, where
the caller puts the pair on another engine (``put_on``), on that one too; then the pair is
let go and collected before the next one loads, so only one is ever resident (E2B in
float32 is 19 GB of a 24 GB machine). A precision that cannot run here (no kernel, too
big for the memory free: :mod:`mtp_viz.sources.precision`, :mod:`mtp_viz.sources.memory`,
refused before any weights are allocated), or that runs out of memory, is a row with the
one sentence saying why. The fastest measured plain step is marked, beside the precision
:func:`mtp_viz.sources.precision.fastest` names for the device and its reason.

The weights a plain step reads (:func:`step_bytes`): every parameter of the target as it is
stored (a quantized weight: its integers, scales and zero points) but its embedding tables,
of which a step reads one row each; the output head, tied or not, is read whole.
"""
from __future__ import annotations

import ctypes
import gc
import sys
from typing import Any, Callable, Iterable

from mtp_viz.errors import UserError


def _read(model) -> list:
    """The parameters a plain step reads whole: all but the embedding tables it reads one row
    of (the output head's weight, tied to a table or not, is read whole)."""
    import torch
    head = model.get_output_embeddings()
    head_weight = getattr(head, "weight", None)
    lookups = {id(m.weight) for m in model.modules()
               if isinstance(m, torch.nn.Embedding) and m.weight is not head_weight}
    return [p for p in model.parameters() if id(p) not in lookups]


def step_params(model) -> int:
    """How many weights a plain step reads (see the module's docstring)."""
    return sum(p.numel() for p in _read(model))


def step_bytes(model) -> int:
    """Bytes of ``model``'s weights a plain step reads, as stored (see the module's docstring)."""
    import torch

    def stored(t) -> int:
        if hasattr(t, "__tensor_flatten__"):   # a torchao tensor: its inner tensors
            inner = [getattr(t, name, None) for name in t.__tensor_flatten__()[0]]
            return sum(stored(i) for i in inner if isinstance(i, torch.Tensor))
        return t.numel() * t.element_size()
    return sum(stored(p) for p in _read(model))


def _row(precision: str, engine: str | None, c: Any = None, width: int = 1, read: int | None = None,
         refused: str | None = None) -> dict[str, Any]:
    """One row of the table: a precision on an engine (None: it did not load), its costs ``c``
    (a Costs), or the sentence saying why not."""
    plain = c.plain if c is not None else None
    return {"precision": precision, "engine": engine, "plain_seconds": plain,
            "tokens_per_second": 1.0 / plain if plain else None, "verify_width": width,
            "verify_seconds": c.verify.get(width) if c is not None else None,
            "draft_seconds": c.draft if c is not None else None,
            "prefill_per_token_seconds": c.prefill_per_token if c is not None else None,
            "compile_seconds": c.compile_seconds if c is not None else None,
            "step_weight_bytes": read, "weight_gb_per_second": read / plain / 1e9 if read and plain else None,
            "fastest": False, "refused": refused, "samples": c.samples if c is not None else {}}


def _out_of_memory() -> tuple[type[BaseException], ...]:
    import torch
    return MemoryError, torch.cuda.OutOfMemoryError


def _one(precision: str, load: Callable[[str], Any], put_on: Callable[[Any], Any] | None, engine: str,
         prompt_tokens: int, draft_tokens: int, repeats: int) -> list[dict[str, Any]]:
    """The rows of one precision: its pair loaded, timed on each engine and let go on return."""
    from mtp_viz.engine.engines import default_engine
    from mtp_viz.sources.interleave import own_clock

    from .profile import costs, prompt_ids
    eager, width = default_engine(), draft_tokens + 1
    try:
        pair = load(precision)
    except UserError as e:
        return [_row(precision, None, width=width, refused=str(e))]   # no engine: it never loaded
    except _out_of_memory():
        return [_row(precision, None, width=width, refused=f"{precision} ran out of memory while it loaded.")]
    rows = []
    try:
        ids, (now, _) = prompt_ids(pair, prompt_tokens), own_clock(pair.device)
        read = step_bytes(pair.target)
        rows.append(_row(precision, eager, costs(pair, eager, ids, draft_tokens, repeats, now), width, read))
        if put_on is not None:
            other = put_on(pair)
            rows.append(_row(precision, engine, width=width, refused=other.compile_note) if other.compile_note
                        else _row(precision, engine, costs(other, engine, ids, draft_tokens, repeats, now), width,
                                  read))
    except _out_of_memory():
        done = {r["engine"] for r in rows}
        rows += [_row(precision, e, width=width, refused=f"{precision} ran out of memory while it was timed.")
                 for e in dict.fromkeys([eager] + ([engine] if put_on is not None else [])) if e not in done]
    return rows


def _free(device: str) -> None:
    """What the last pair held, given back: collected, then on glibc the allocator's free pages
    returned to the system (``malloc_trim``: a weight under malloc's mmap threshold is freed into
    its heap, which the memory check of the next load, reading what the system has free, would
    not count), and on CUDA torch's cached blocks."""
    gc.collect()
    if sys.platform.startswith("linux"):
        try:
            ctypes.CDLL("libc.so.6").malloc_trim(0)
        except (OSError, AttributeError):   # not glibc (musl): nothing to trim
            pass
    if str(device).startswith("cuda"):
        import torch
        torch.cuda.empty_cache()


def sweep(precisions: Iterable[str], load: Callable[[str], Any], device: str, *, engine: str = "eager",
          put_on: Callable[[Any], Any] | None = None, prompt_tokens: int = 32, draft_tokens: int = 4,
          repeats: int = 3, say: Callable[[str], None] | None = None) -> dict[str, Any]:
    """Each of ``precisions`` (names of :data:`mtp_viz.sources.precision.PRECISIONS`) loaded by
    ``load(name)`` (a UserError: the row says it), timed on the eager engine and, with
    ``put_on`` (the pair -> the same pair on ``engine``, whose ``compile_note`` says why not),
    on ``engine``; one pair resident at a time. JSON-ready: the rows, the device's fastest
    precision and why, and the fastest measured row (also marked ``fastest``)."""
    from mtp_viz.sources.interleave import own_clock
    from mtp_viz.sources.precision import fastest
    rows: list[dict[str, Any]] = []
    for p in precisions:
        _free(device)
        got = _one(p, load, put_on, engine, prompt_tokens, draft_tokens, repeats)
        _free(device)
        for r in got:
            if say is not None:
                where = f"{p} on the {r['engine']} engine" if r["engine"] else p
                say(f"{where}: " + (r["refused"] or f"plain step {r['plain_seconds'] * 1e3:.2f} ms"))
        rows += got
    timed = [r for r in rows if r["plain_seconds"] is not None]
    top = min(timed, key=lambda r: r["plain_seconds"]) if timed else None
    if top is not None:
        top["fastest"] = True
    best = fastest(device)
    return {"rows": rows, "prompt_tokens": prompt_tokens, "draft_tokens": draft_tokens, "repeats": repeats,
            "clock": own_clock(device)[1],
            "fastest": {"precision": best.precision, "native_bfloat16": best.native_bfloat16, "why": best.why},
            "fastest_measured": None if top is None else {k: top[k] for k in ("precision", "engine", "plain_seconds",
                                                                               "tokens_per_second")}}


__all__ = ["step_bytes", "sweep"]
