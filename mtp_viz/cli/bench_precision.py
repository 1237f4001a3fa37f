"""The bench's precision pairs: ``--precisions float32/float32,bfloat16/float32,int8/int8``.

Every pair runs in the same bench run, interleaved with the others prompt by prompt (the
rotation of :mod:`mtp_viz.cli.bench`), each distinct model in each distinct precision
loaded once (:func:`mtp_viz.sources.models.load_pairs`). Each pair is reduced on its own
(:func:`mtp_viz.cli.bench_report.reduce`) against the plain decoding of *its own target*,
so a row's speedup is over that same target's plain decoding, and its row names the
precisions (``target_precision``, ``drafter_precision``). Each row also carries:

- ``drift``: how far that target's greedy text departs from the float32 target's on the
  same prompts (:func:`mtp_viz.analysis.metrics.drift` of their plain runs: the
  precision's effect on the output, not speculation's); present when float32 is one of
  the targets and decoding is greedy;
- ``autoregressive_tokens_per_second``: that target's own plain speed;
- ``exact``: whether parity is enforced. Greedy speculative output must equal
  transformers' for targets that compute in float32 (float32, int8 on a CPU); in
  bfloat16 and float16 a verification rounds differently from a one-position step, so a
  difference there is reported, not a failure (see README, "Does quantization hurt MTP?").
  transformers 5.24's assisted decoding does not run a pair whose two models compute in
  different dtypes, so such a pair has no reference run.
"""
from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import Any

from mtp_viz.analysis import metrics
from mtp_viz.errors import UserError
from mtp_viz.sources.precision import Precision


@dataclass
class Arm:
    """One precision pair of a bench: its models and its runner."""
    precision: Precision        # resolved: no None
    pair: Any                   # ModelPair
    runner: Any                 # bench.Runner
    engine: str = "eager"       # "eager" or "compiled" (bench --compile)
    several_engines: bool = False

    @property
    def label(self) -> str:
        return f"{self.precision.label} {self.engine}" if self.several_engines else self.precision.label

    @property
    def exact(self) -> bool:
        """Greedy parity is enforced: the target computes in float32."""
        return str(self.pair.target.dtype) == "torch.float32"

    @property
    def has_reference(self) -> bool:
        """transformers' assisted decoding runs this pair: both models compute in one dtype."""
        return self.pair.target.dtype == self.pair.drafter_model.dtype


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


def compiled(pairs) -> list:
    """``bench --compile``: each pair again on the compiled engine, sharing its models
    (:meth:`mtp_viz.sources.pair.ModelPair.compile`, compiled now, timed). A pair that
    cannot compile is left out with its one sentence on stderr."""
    out = []
    for p in pairs:
        twin = p.compiled()
        note = twin.compile_note
        if note:
            print(f"mtp-viz bench: {note}", file=sys.stderr)
            continue
        print(f"mtp-viz bench: compiled {p.precision['target']}/{p.precision['drafter']} in "
              f"{twin.compile_seconds:.1f} s", file=sys.stderr)
        out.append(twin)
    return out


def drifts(records) -> dict[str, float | None]:
    """Target precision -> drift of its plain greedy outputs from the float32 target's
    (repeat 0; greedy decoding is the same every repeat)."""
    plain: dict[str, dict[str, tuple]] = {}
    for r in records:
        if r.mode == "autoregressive" and r.repeat == 0 and r.engine in (None, "eager"):
            plain.setdefault(r.target_precision, {})[r.prompt_id] = r.ids
    ref = plain.get("float32")
    if ref is None:
        return {t: None for t in plain}
    return {t: metrics.drift([by[p] for p in ref], [ref[p] for p in ref]) for t, by in plain.items()}


def _own(records, events, arm: Arm):
    """The records and events of one arm, with the plain runs of its target."""
    t, d = arm.precision.target, arm.precision.drafter
    recs = [r for r in records if r.target_precision == t and (r.mode == "autoregressive" or r.drafter_precision == d)
            and r.engine in (arm.engine, None)]
    ev = {(mode, name): runs for (mode, name, et, ed, engine), runs in events.items()
          if et == t and (mode == "autoregressive" or ed == d) and engine in (arm.engine, None)}
    return recs, ev


def reduce(meta, records, events, settings, arms: list[Arm], greedy: bool) -> dict[str, Any]:
    """One result over every arm: rows named by setting (and, with several pairs, by
    ``<setting> <target>/<drafter>``), each with its precisions."""
    from . import bench_report
    drift = drifts(records) if greedy else {}
    several = len(arms) > 1
    rows, categories, plain = [], {}, {}
    for arm in arms:
        sub = bench_report.reduce(meta, *_own(records, events, arm), settings)
        sub["autoregressive"]["engine"] = arm.engine
        plain[arm.label if arm.several_engines else arm.precision.target] = sub["autoregressive"]
        rename = {s.name: f"{s.name} {arm.label}" if several else s.name for s in settings}
        for row in sub["settings"]:
            rows.append({**row, "setting": rename[row["setting"]], "target_precision": arm.precision.target,
                         "drafter_precision": arm.precision.drafter, "precision": arm.label,
                         "engine": arm.engine,
                         "drift": drift.get(arm.precision.target), "exact": arm.exact,
                         "has_reference": arm.has_reference,
                         "autoregressive_tokens_per_second": sub["autoregressive"]["tokens_per_second"],
                         "verify_slope": sub["verify_slope"]})
        for c in sub["categories"]:
            entry = categories.setdefault(c["category"], {"category": c["category"], "prompts": c["prompts"]})
            entry.update({rename[s.name]: c[s.name] for s in settings})
    first = arms[0].label if arms[0].several_engines else arms[0].precision.target
    return {"meta": meta, "autoregressive": plain[first], "autoregressive_by_precision": plain,
            "compiled_over_eager": _engine_ratios(arms, plain, rows),
            "verify_slope": rows[0]["verify_slope"] if rows else None, "settings": rows,
            "categories": list(categories.values()), "runs": [r.as_dict() for r in records]}


def _engine_ratios(arms, plain, rows) -> dict[str, Any] | None:
    """bench --compile: tokens per second of the compiled engine over the eager one, in
    the same run, for plain decoding and each setting (per precision pair); None without."""
    if not any(a.engine == "compiled" for a in arms):
        return None
    out = {}
    for a in arms:
        if a.engine != "compiled":
            continue
        eager = next((b for b in arms if b.engine == "eager" and b.precision == a.precision), None)
        if eager is None:
            continue
        ratio = {"autoregressive": _ratio(plain[a.label]["tokens_per_second"], plain[eager.label]["tokens_per_second"])}
        by_setting = {r["setting"].removesuffix(f" {eager.label}"): r for r in rows if r["precision"] == eager.label}
        for r in rows:
            if r["precision"] == a.label:
                name = r["setting"].removesuffix(f" {a.label}")
                e = by_setting.get(name)
                ratio[name] = _ratio(r.get("tokens_per_second"), e.get("tokens_per_second") if e else None)
        out[a.precision.label] = ratio
    return out


def _ratio(x, y):
    return x / y if x and y else None


COLUMNS = [  # (title, key, format) of the precision table
    ("precisions", "precision", "{}"), ("setting", None, None), ("accept", "acceptance_rate", "{:.1%}"),
    ("first draft", None, None), ("α", "alpha", "{:.3f}"), ("τ", "decode_tokens_per_forward", "{:.2f}"),
    ("c", "cost_coefficient", "{:.3f}"), ("v", "verify_cost", "{:.2f}"),
    ("plain tok/s", "autoregressive_tokens_per_second", "{:.1f}"), ("speedup", "speedup", "×{:.2f}"),
    ("drift", "drift", "{:.1%}"), ("parity", None, None),
]


def _cell(row, title, key, fmt) -> str:
    if title == "setting":  # the row's name without its precisions, which the first column gives
        return f"{row['schedule']}-{row['gamma']}"
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


def markdown(result) -> list[str]:
    """The precision table's lines (none for a bench of one pair)."""
    if len(result["meta"].get("precisions", [])) < 2:
        return []
    lines = ["", "### By precision (target/drafter)", "",
             "| " + " | ".join(t for t, _, _ in COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    lines += ["| " + " | ".join(_cell(r, *c) for c in COLUMNS) + " |" for r in result["settings"]]
    lines += ["", "speedup: over the plain decoding of the same target (median of repeats); plain tok/s: that "
              "target's own; τ: tokens per target forward after the prefill; first draft: acceptance of the first "
              "drafted position; drift: share of the plain greedy text that departs from the float32 target's "
              "(per prompt 1 − common prefix ÷ tokens, averaged); parity: equal to transformers' assisted "
              "decoding (enforced for float32 arithmetic; 'differs' in bfloat16/float16, where verification "
              "rounds differently from one token at a time)."]
    return lines
