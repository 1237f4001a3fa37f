"""Several precision pairs (and engines) in one bench run, each reduced on its own.

Every pair runs in the same run, interleaved with the others prompt by prompt
(:mod:`.session`), each distinct model in each distinct precision loaded once
(:func:`mtp_viz.sources.models.load_pairs`). Each pair is reduced on its own
(:func:`.reduce.reduce`) against the plain decoding of *its own target*, so a row's
speedup is over that same target's plain decoding, and its row names the precisions.
Each row also carries (:class:`.reduce.ArmOf`):

- ``drift``: how far that target's greedy text departs from the float32 target's on the
  same prompts (:func:`mtp_viz.analysis.metrics.drift` of their plain runs: the
  precision's effect on the output, not speculation's); present when float32 is one of
  the targets and decoding is greedy;
- ``autoregressive_tokens_per_second``: that target's own plain speed;
- ``exact``: whether parity is enforced. Greedy speculative output must equal
  transformers' for targets that compute in float32 (float32, int8 on a CPU); in
  bfloat16 and float16 a verification rounds differently from a one-position step, so a
  difference there is reported, not a failure (see docs/precision.md).
  transformers 5.24's assisted decoding does not run a pair whose two models compute in
  different dtypes, so such a pair has no reference run.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Sequence

from mtp_viz.analysis import metrics
from mtp_viz.sources.precision import Precision

from . import reduce as one_arm  # one arm's records reduced (this module: every arm's)
from .peers import PeerRow, peer_rows
from .records import AUTOREGRESSIVE, LOCAL_LABELS, REFERENCE, Record, RunKey, Setting
from .reduce import CategoryRow, PlainRow, SettingRow


@dataclass(frozen=True)
class Arm:
    """One precision pair of a bench on one engine: its models and its runner."""
    precision: Precision        # resolved: no None
    pair: Any                   # ModelPair
    runner: Any                 # measure.runner.Runner
    engine: str = "eager"       # what decodes it (its pair's Ran.engine)
    several_engines: bool = False
    baseline: bool = True       # the engine others are held against (the eager one; bench --compile adds others)
    local = True                # it runs on this machine's engine (no server)

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

    def run(self, mode: str, prompt: str, setting: Setting | None = None, n: int | None = None):
        """One timed run on this arm's runner, placed: its precisions and engine (none for
        transformers' reference run) and the prompt's length."""
        rec, events = self.runner.run(mode, prompt, setting, n)
        return dataclasses.replace(
            rec, prompt_tokens=len(self.runner.encode(prompt)), target_precision=self.precision.target,
            drafter_precision=self.precision.drafter if mode != AUTOREGRESSIVE else None,
            engine=self.engine if mode != REFERENCE else None), events

    def close(self) -> None:
        self.runner.close()

    def owns(self, key: RunKey) -> bool:
        """Runs of this arm, and its target's plain runs."""
        t, d = self.precision.target, self.precision.drafter
        return (key.target_precision == t and (key.mode == AUTOREGRESSIVE or key.drafter_precision == d)
                and key.engine in (self.engine, None))


def drifts(records: Sequence[Record], engine: str) -> dict[str, float | None]:
    """Target precision -> drift of its plain greedy outputs on ``engine`` (the baseline
    arms') from the float32 target's (repeat 0; greedy decoding is the same every repeat)."""
    plain: dict[str, dict[str, tuple]] = {}
    for r in records:
        if r.mode == AUTOREGRESSIVE and r.repeat == 0 and r.engine in (None, engine):
            plain.setdefault(r.target_precision, {})[r.prompt_id] = r.ids
    ref = plain.get("float32")
    if ref is None:
        return {t: None for t in plain}
    return {t: metrics.drift([by[p] for p in ref], [ref[p] for p in ref]) for t, by in plain.items()}


@dataclass(frozen=True)
class BenchResult:
    """A local bench, reduced over every arm: :meth:`as_dict` is bench.json."""
    meta: dict[str, Any]
    plain: dict[str, PlainRow]          # each target's (each arm's, with several engines) plain decoding
    first: str                          # the key of ``plain`` the summary line reports
    compiled_over_eager: dict[str, Any] | None
    settings: tuple[SettingRow, ...]
    categories: tuple[CategoryRow, ...]
    runs: tuple[Record, ...]
    peers: tuple[PeerRow, ...] = ()
    fastest_plain: dict[str, Any] | None = None   # {"decoder", "tokens_per_second"}: see :func:`fastest`

    def as_dict(self) -> dict[str, Any]:
        over = lambda tps: _ratio(tps, (self.fastest_plain or {}).get("tokens_per_second"))  # noqa: E731
        plain = {k: {**v.as_dict(), "speedup_over_fastest_plain": over(v.tokens_per_second)}
                 for k, v in self.plain.items()}
        return {"meta": self.meta, "autoregressive": plain[self.first], "autoregressive_by_precision": plain,
                "compiled_over_eager": self.compiled_over_eager,
                "fastest_plain": self.fastest_plain,
                "verify_slope": self.settings[0].arm.verify_slope if self.settings else None,
                "settings": [{**r.as_dict(), "speedup_over_fastest_plain": over(r.tokens_per_second)}
                             for r in self.settings],
                "peers": [dataclasses.replace(p, speedup_over_fastest_plain=over(p.tokens_per_second)).as_dict()
                          for p in self.peers],
                "categories": [c.as_dict() for c in self.categories],
                "runs": [r.as_dict(LOCAL_LABELS) for r in self.runs]}


def fastest(plain: dict[str, PlainRow], peers: Sequence[PeerRow]) -> dict[str, Any] | None:
    """The fastest plain decoder measured in the run, local (each arm's autoregressive
    decoding) or a peer that does not speculate and, where checked, wrote the local plain
    tokens in every run: ``{"decoder", "tokens_per_second"}``. Every row's
    ``speedup_over_fastest_plain`` is its tokens per second over this one's."""
    rates = {f"mtp-viz {name}": row.tokens_per_second for name, row in plain.items()}
    rates.update({p.peer: p.tokens_per_second for p in peers
                  if p.setting == "plain" and p.same_tokens_as_plain is not False})
    return one_arm.fastest(rates)


def reduce(meta: dict[str, Any], records: Sequence[Record], events: dict[RunKey, list],
           settings: Sequence[Setting], arms: Sequence[Arm], greedy: bool, peers: Sequence[Any] = ()) -> BenchResult:
    """One result over every arm: rows named by setting (and, with several pairs, by
    ``<setting> <target>/<drafter>``), each with its precisions; then each peer's row."""
    drift = drifts(records, next(a.engine for a in arms if a.baseline)) if greedy else {}
    several = len(arms) > 1
    rows: list[SettingRow] = []
    cells: dict[tuple[str, int], dict] = {}   # (category, prompts) -> every arm's cells by row name
    plain: dict[str, PlainRow] = {}
    for arm in arms:
        own = [r for r in records if arm.owns(r.key)]
        own_events = {RunKey(k.mode, k.setting): v for k, v in events.items() if arm.owns(k)}
        sub = one_arm.reduce(own, own_events, settings)
        plain[arm.label if arm.several_engines else arm.precision.target] = dataclasses.replace(
            sub.autoregressive, engine=arm.engine)
        of = one_arm.ArmOf(arm.precision.target, arm.precision.drafter, arm.label, arm.engine,
                             drift.get(arm.precision.target), arm.exact, arm.has_reference,
                             sub.autoregressive.tokens_per_second, sub.verify_slope)
        rename = {s.name: f"{s.name} {arm.label}" if several else s.name for s in settings}
        rows += [dataclasses.replace(r, setting=rename[r.setting], arm=of) for r in sub.settings]
        for c in sub.categories:
            cells.setdefault((c.category, c.prompts), {}).update(
                {rename[name]: cell for name, cell in c.by_setting.items()})
    first = arms[0].label if arms[0].several_engines else arms[0].precision.target
    categories = tuple(CategoryRow(cat, prompts, by) for (cat, prompts), by in cells.items())
    base = next(a for a in arms if a.baseline)
    plain_ids = {(r.prompt_id, r.repeat): r.ids for r in records
                 if r.mode == AUTOREGRESSIVE and base.owns(r.key)} if greedy else None
    others = peer_rows(peers, records, events, plain_ids)
    return BenchResult(meta, plain, first, engine_ratios(arms, plain, rows), tuple(rows), categories,
                       tuple(records), tuple(others), fastest(plain, others))


def engine_ratios(arms: Sequence[Arm], plain: dict[str, PlainRow], rows: Sequence[SettingRow]
                  ) -> dict[str, Any] | None:
    """bench --compile: tokens per second of the compiled engine over the eager one, in
    the same run, for plain decoding and each setting (per precision pair); None without."""
    if all(a.baseline for a in arms):
        return None
    out = {}
    for a in arms:
        eager = next((b for b in arms if b.baseline and b.precision == a.precision), None)
        if a.baseline or eager is None:
            continue
        ratio = {"autoregressive": _ratio(plain[a.label].tokens_per_second, plain[eager.label].tokens_per_second)}
        by_setting = {r.setting.removesuffix(f" {eager.label}"): r for r in rows if r.arm.precision == eager.label}
        for r in rows:
            if r.arm.precision == a.label:
                name = r.setting.removesuffix(f" {a.label}")
                e = by_setting.get(name)
                ratio[name] = _ratio(r.tokens_per_second, e.tokens_per_second if e else None)
        out[a.precision.label] = ratio
    return out


def _ratio(x, y):
    return x / y if x and y else None


__all__ = ["Arm", "BenchResult", "drifts", "engine_ratios", "fastest", "reduce"]
