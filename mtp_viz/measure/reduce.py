"""A bench's records and events, reduced to typed rows.

Every rate is pooled before it is divided (total tokens ÷ total seconds over the prompts
of one repeat), and every timing figure is the median over repeats. The acceptance
figures come from :mod:`mtp_viz.analysis.metrics` over all of a setting's event streams;
the predictions from :mod:`mtp_viz.engine.theory`. Each row's :meth:`as_dict` is what
bench.json writes, key for key.
"""
from __future__ import annotations

import dataclasses
import statistics
from dataclasses import asdict, dataclass
from typing import Any, Sequence

from mtp_viz.analysis import metrics
from mtp_viz.engine import theory
from mtp_viz.engine.events import tau_of

from .records import AUTOREGRESSIVE, REFERENCE, SPECULATIVE, Record, RunKey, Setting

# (mode, setting) -> the (prompt, repeat, events) of those runs
Events = dict[RunKey, list]


def median(xs):
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def ratio(a, b):
    return a / b if a is not None and b else None


def tps_by_repeat(records: Sequence[Record], mode: str, setting: str = "", category: str | None = None,
                  decode: bool = False) -> dict[int, float]:
    """repeat -> pooled tokens per second (Σ tokens ÷ Σ seconds over the prompts).

    decode=True leaves out the prefill forward and the token it makes: what Leviathan
    et al.'s formula describes (the prefill costs the same in every mode and dilutes
    the speedup of short generations)."""
    tok: dict[int, float] = {}
    sec: dict[int, float] = {}
    for r in records:
        if r.mode == mode and r.setting == setting and (category is None or r.category == category):
            if decode and r.prefill_seconds is None:
                continue
            tok[r.repeat] = tok.get(r.repeat, 0) + r.new_tokens - (1 if decode else 0)
            sec[r.repeat] = sec.get(r.repeat, 0) + r.seconds - (r.prefill_seconds if decode else 0)
    return {k: tok[k] / sec[k] for k in tok if sec[k] > 0}


def speedup_ratios(records: Sequence[Record], mode: str, setting: str, category: str | None = None,
                   decode: bool = False) -> list[float]:
    """Per repeat, this mode's tokens/s over autoregressive tokens/s: the bench's
    speedups, the app's Measure's and a server bench's (over the baseline server) alike."""
    base = tps_by_repeat(records, AUTOREGRESSIVE, "", category, decode)
    this = tps_by_repeat(records, mode, setting, category, decode)
    return [this[k] / base[k] for k in sorted(this) if base.get(k)]


def fastest(rates: dict[str, float | None]) -> dict[str, Any] | None:
    """The fastest of the plain decoders measured in one run (name -> tokens per second):
    ``{"decoder", "tokens_per_second"}``, None when none has a rate. What every surface
    holds a speedup against besides its own plain decoding (the bench's rows, Measure's)."""
    rates = {k: v for k, v in rates.items() if v}
    if not rates:
        return None
    best = max(rates, key=rates.get)
    return {"decoder": best, "tokens_per_second": rates[best]}


NO_CALL = "no call (one repeat)"


def verdict(ratios: Sequence[float]) -> str:
    """What repeated speedups let a reader call, the one rule every surface uses (Measure,
    the bench, a notebook): "faster" or "slower" only when every repeat agrees; "too close
    to call" when repeats fall either side of ×1; with fewer than two repeats there is no
    spread to judge, so no call is made (:data:`NO_CALL`)."""
    if len(ratios) < 2:
        return NO_CALL
    if min(ratios) > 1.0:
        return "faster"
    if max(ratios) < 1.0:
        return "slower"
    return "too close to call"


def speedup(records, mode, setting, category=None, decode=False):
    """Median over repeats of this mode's tokens/s over autoregressive tokens/s."""
    return median(speedup_ratios(records, mode, setting, category, decode))


def overhead(records, setting, key="seconds"):
    """Median over repeats of Σ our wall time ÷ Σ the reference's wall time
    (``key="cpu_seconds"``: process CPU time, steadier on a machine shared with others)."""
    ours: dict[int, float] = {}
    ref: dict[int, float] = {}
    for r in records:
        if r.setting == setting and r.mode in (SPECULATIVE, REFERENCE) and getattr(r, key) is not None:
            d = ours if r.mode == SPECULATIVE else ref
            d[r.repeat] = d.get(r.repeat, 0) + getattr(r, key)
    return median([ours[k] / ref[k] for k in ours if ref.get(k)])


def forwards(records, mode, setting):
    """Target forwards of repeat 0 and τ over them (:func:`mtp_viz.engine.events.tau_of`)."""
    rs = [r for r in records if r.mode == mode and r.setting == setting and r.repeat == 0]
    f = sum(r.target_forwards for r in rs)
    return f, tau_of(sum(r.new_tokens for r in rs), f, len(rs))


def events_of(events: Events, mode: str, setting: str, category: str | None = None) -> list:
    out = []
    for prompt, _, ev in events.get(RunKey(mode, setting), []):
        if category is None or prompt.category == category:
            out.extend(ev)
    return out


@dataclass(frozen=True)
class PlainRow:
    """Plain decoding of one target: bench.json's ``autoregressive``."""
    tokens_per_second: float | None
    target_forwards: int
    step_seconds: float | None
    engine: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return {k: v for k, v in asdict(self).items() if k != "engine" or v is not None}


@dataclass(frozen=True)
class ArmOf:
    """Which precision pair and engine a row measured (bench.json writes these fields in
    every row of a local bench)."""
    target_precision: str
    drafter_precision: str
    precision: str
    engine: str
    drift: float | None
    exact: bool
    has_reference: bool
    autoregressive_tokens_per_second: float | None
    verify_slope: float | None


@dataclass(frozen=True)
class SettingRow:
    """One setting's figures: bench.json's ``settings`` rows."""
    setting: str
    schedule: str
    draft_tokens: int
    tokens_per_second: float | None
    speedup: float | None
    verdict: str                     # :func:`verdict` of the per-repeat speedups
    decode_speedup: float | None
    reference_tokens_per_second: float | None
    reference_speedup: float | None
    overhead_vs_reference: float | None
    overhead_vs_reference_cpu: float | None
    target_forwards: int
    reference_target_forwards: int | None
    tau: float | None
    reference_tau: float | None
    acceptance_rate: float | None
    alpha: float | None
    mean_draft_tokens: float | None
    tau_predicted: float | None
    cost_coefficient: float | None
    verify_cost: float | None
    predicted_speedup: float | None
    measured_over_predicted: float | None
    predicted_speedup_with_verify_cost: float | None
    optimal_draft_tokens: int | None
    per_position_conditional: list
    per_position_unconditional: list
    parity: bool | None
    parity_failures: int
    matches_autoregressive: bool
    optimal_draft_tokens_with_verify_cost: int | None = None   # with the verification slope (when measured)
    arm: ArmOf | None = None

    def as_dict(self) -> dict[str, Any]:
        out = {k: v for k, v in asdict(self).items() if k != "arm"}
        if out["optimal_draft_tokens_with_verify_cost"] is None:  # absent, not null, where no slope was measured
            del out["optimal_draft_tokens_with_verify_cost"]
        return {**out, **(asdict(self.arm) if self.arm else {})}


@dataclass(frozen=True)
class CategoryCell:
    speedup: float | None
    alpha: float | None
    tau: float | None


@dataclass(frozen=True)
class CategoryRow:
    """One category's figures by setting name: bench.json's ``categories`` entries."""
    category: str
    prompts: int
    by_setting: dict[str, CategoryCell]   # by the setting's (the row's) name

    def as_dict(self) -> dict[str, Any]:
        return {"category": self.category, "prompts": self.prompts,
                **{name: asdict(cell) for name, cell in self.by_setting.items()}}


@dataclass(frozen=True)
class Reduced:
    """One precision pair's bench, reduced."""
    autoregressive: PlainRow
    verify_slope: float | None
    settings: tuple[SettingRow, ...]
    categories: tuple[CategoryRow, ...]


def setting_row(records, events: Events, s: Setting, ar_events: list, ar_step) -> SettingRow:
    ev = events_of(events, SPECULATIVE, s.name)
    summ = metrics.summarize(ev)
    c = metrics.cost_coefficient(ev, ar_events)
    draft_tokens = summ.mean_draft_tokens or float(s.draft_tokens)
    alpha = summ.alpha
    predicted = theory.predicted_speedup(alpha, draft_tokens, c)
    v = ratio(summ.verify_seconds_per_step, ar_step)   # verification cost in AR steps
    decode_speedup = speedup(records, SPECULATIVE, s.name, decode=True)
    fwd, _ = forwards(records, SPECULATIVE, s.name)
    ref_fwd, ref_tau = forwards(records, REFERENCE, s.name)
    ours = [r for r in records if r.mode == SPECULATIVE and r.setting == s.name]
    parity = [r.parity for r in ours]
    return SettingRow(
        s.name, s.schedule, s.draft_tokens,
        tokens_per_second=median(list(tps_by_repeat(records, SPECULATIVE, s.name).values())),
        speedup=speedup(records, SPECULATIVE, s.name),
        verdict=verdict(speedup_ratios(records, SPECULATIVE, s.name)), decode_speedup=decode_speedup,
        reference_tokens_per_second=median(list(tps_by_repeat(records, REFERENCE, s.name).values())),
        reference_speedup=speedup(records, REFERENCE, s.name),
        overhead_vs_reference=overhead(records, s.name),
        overhead_vs_reference_cpu=overhead(records, s.name, "cpu_seconds"),
        target_forwards=fwd, reference_target_forwards=ref_fwd or None,
        tau=summ.tau, reference_tau=ref_tau,
        acceptance_rate=summ.acceptance_rate, alpha=alpha, mean_draft_tokens=summ.mean_draft_tokens,
        tau_predicted=theory.expected_tokens(alpha, draft_tokens),
        cost_coefficient=c, verify_cost=v, predicted_speedup=predicted,
        measured_over_predicted=ratio(decode_speedup, predicted),
        predicted_speedup_with_verify_cost=(theory.expected_tokens(alpha, draft_tokens) / (draft_tokens * c + v)
                                            if v else None),
        optimal_draft_tokens=theory.optimal_draft_tokens(alpha, c)[0] if summ.drafted else None,
        per_position_conditional=summ.per_position_conditional,
        per_position_unconditional=summ.per_position_unconditional,
        parity=None if all(p is None for p in parity) else sum(p is False for p in parity) == 0,
        parity_failures=sum(p is False for p in parity),
        matches_autoregressive=all(r.matches_autoregressive is not False for r in ours))


def reduce(records: Sequence[Record], events: Events, settings: Sequence[Setting]) -> Reduced:
    """One precision pair's records and events (keyed by mode and setting only)."""
    ar_events = events_of(events, AUTOREGRESSIVE, "")
    ar_step = metrics.target_step_seconds(ar_events)
    rows = [setting_row(records, events, s, ar_events, ar_step) for s in settings]
    slope = verify_slope(rows)
    if slope is not None:
        rows = [with_verify_slope(r, slope) for r in rows]
    categories = []
    for cat in sorted({r.category for r in records}):
        cells = {s.name: CategoryCell(speedup(records, SPECULATIVE, s.name, cat),
                                      metrics.alpha_estimate(events_of(events, SPECULATIVE, s.name, cat)),
                                      metrics.tau(events_of(events, SPECULATIVE, s.name, cat)))
                 for s in settings}
        categories.append(CategoryRow(cat, len({r.prompt_id for r in records if r.category == cat}), cells))
    plain = PlainRow(median(list(tps_by_repeat(records, AUTOREGRESSIVE).values())),
                     forwards(records, AUTOREGRESSIVE, "")[0], ar_step)
    return Reduced(plain, slope, tuple(rows), tuple(categories))


def with_verify_slope(row: SettingRow, slope: float) -> SettingRow:
    """The row with its best draft length once each drafted token's verification cost
    (``slope`` autoregressive steps per drafted token) is counted."""
    if not row.alpha:
        return row
    best = theory.optimal_draft_tokens(row.alpha, row.cost_coefficient + slope)[0]
    return dataclasses.replace(row, optimal_draft_tokens_with_verify_cost=best)


def verify_slope(rows: Sequence[SettingRow]) -> float | None:
    """Least-squares slope s of verification cost v(γ) ≈ v0 + sγ over constant settings
    (in autoregressive steps per drafted token); None with fewer than two lengths."""
    pts = [(r.mean_draft_tokens, r.verify_cost) for r in rows if r.schedule == "constant" and r.verify_cost]
    if len({round(x, 6) for x, _ in pts}) < 2:
        return None
    mx = sum(x for x, _ in pts) / len(pts)
    my = sum(y for _, y in pts) / len(pts)
    sxx = sum((x - mx) ** 2 for x, _ in pts)
    return max(0.0, sum((x - mx) * (y - my) for x, y in pts) / sxx)


__all__ = ["ArmOf", "CategoryCell", "CategoryRow", "Events", "PlainRow", "Reduced", "SettingRow", "fastest", "median",
           "overhead", "ratio", "reduce", "speedup", "speedup_ratios", "tps_by_repeat", "verify_slope"]
