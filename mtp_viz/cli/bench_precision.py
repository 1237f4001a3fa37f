"""The bench's precision pairs: ``--precisions float32/float32,bfloat16/float32,int8/int8``.

Their flags, the same pairs on another engine (``--engine``, ``--compile``) with their lines on stderr, and the
precision table of the report; running the pairs side by side and reducing each against
its own target's plain decoding is :mod:`mtp_viz.measure.arms`' (which says what each
row's ``drift``, ``exact`` and ``autoregressive_tokens_per_second`` mean).
"""
from __future__ import annotations

import sys

from mtp_viz.errors import UserError
from mtp_viz.sources.precision import Precision
from mtp_viz.views.document import Table


def parse(args) -> list[Precision]:
    """The bench's precision pairs: ``--precisions``, else the one pair ``--dtype``,
    ``--target-precision`` and ``--drafter-precision`` name; every name checked."""
    if not args.precisions:
        return [Precision.of(args.dtype, args.target_precision, args.drafter_precision)]
    if args.dtype or args.target_precision or args.drafter_precision:
        raise UserError("--precisions names each pair's precisions; leave out --dtype, --target-precision "
                        "and --drafter-precision.")
    pairs = [Precision.parse(item) for item in args.precisions.split(",") if item.strip()]
    if not pairs:
        raise UserError("--precisions must list target/drafter pairs, like float32/float32,int8/int8.")
    if len(set(pairs)) < len(pairs):
        raise UserError("--precisions lists a pair twice.")
    return pairs


def on_engine(pairs, engine: str, runs=()) -> list:
    """``bench --engine``: each pair again on ``engine``, sharing its models
    (:meth:`mtp_viz.sources.pair.ModelPair.on`); on one that compiles, every graph the
    bench's ``runs`` (RunSettings) can meet compiled now, before any timed run, each graph
    reported on stderr as it starts, and timed. A pair that cannot go there is left out
    with its one sentence on stderr."""
    from mtp_viz.engine.engines import ENGINES

    from .flags import compile_progress
    out = []
    for p in pairs:
        other = p.on(engine, settings=runs, progress=compile_progress("mtp-viz bench"))
        if other.compile_note:
            print(f"mtp-viz bench: {other.compile_note}", file=sys.stderr)
            continue
        if ENGINES[engine].compiles:
            print(f"mtp-viz bench: compiled {p.precision['target']}/{p.precision['drafter']} in "
                  f"{other.compile_seconds:.1f} s", file=sys.stderr)
        out.append(other)
    return out


COLUMNS = [  # (title, key, format) of the precision table
    ("precisions", "precision", "{}"), ("setting", None, None), ("accept", "acceptance_rate", "{:.1%}"),
    ("first draft", None, None), ("α", "alpha", "{:.3f}"), ("τ", "tau", "{:.2f}"),
    ("c", "cost_coefficient", "{:.3f}"), ("v", "verify_cost", "{:.2f}"),
    ("plain tok/s", "autoregressive_tokens_per_second", "{:.1f}"), ("speedup", "speedup", "×{:.2f}"),
    ("drift", "drift", "{:.1%}"), ("parity", None, None),
]


def _cell(row, title, key, fmt) -> str:
    if title == "setting":  # the row's name without its precisions, which the first column gives
        return f"{row['schedule']}-{row['draft_tokens']}"
    if title == "first draft":
        pos = row.get("per_position_conditional") or []
        return f"{pos[0]:.0%}" if pos and pos[0] is not None else "–"
    if title == "parity":
        if row["parity"] is None:
            return "– (no reference)" if not row.get("has_reference", True) else "–"
        if row["parity"]:
            return "ok"
        return f"FAIL ×{row['parity_failures']}" if row.get("exact", True) else f"differs ×{row['parity_failures']}"
    value = row.get(key)
    return "–" if value is None else fmt.format(value)


def blocks(result) -> list:
    """The precision table as :mod:`mtp_viz.views.document` blocks (none for a bench of one pair)."""
    if len(result["meta"].get("precisions", [])) < 2:
        return []
    return [("h3", "By precision (target/drafter)"),
            ("table", Table(tuple(t for t, _, _ in COLUMNS),
                            tuple(tuple(_cell(r, *c) for c in COLUMNS) for r in result["settings"]))),
            ("p", "speedup: over the plain decoding of the same target (median of repeats); plain tok/s: that "
                  "target's own; τ: tokens per target forward after the prefill; first draft: acceptance of the "
                  "first drafted position; drift: share of the plain greedy text that departs from the float32 "
                  "target's (per prompt 1 − common prefix ÷ tokens, averaged); parity: equal to transformers' "
                  "assisted decoding (enforced for float32 arithmetic; 'differs' in bfloat16/float16, where "
                  "verification rounds differently from one token at a time).")]
