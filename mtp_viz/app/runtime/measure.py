"""Measure: N interleaved repeats of both modes, off-screen, through the bench's own
runner and reduction, so the app's considered figure is the bench's figure."""
from __future__ import annotations

import statistics
import threading
from dataclasses import dataclass, field, replace
from typing import Any

from mtp_viz.errors import UserError
from mtp_viz.sources.settings import MAX_DRAFT_TOKENS, RunSettings


@dataclass(frozen=True)
class Measurement:
    """N interleaved repeats of both modes, reduced as ``mtp-viz bench`` reduces them."""
    ratios: tuple[float, ...]          # per repeat: speculative tokens/s ÷ autoregressive
    spec_tps: float                    # medians over repeats
    ar_tps: float
    threads: int
    repeats: int = field(init=False)

    def __post_init__(self):
        object.__setattr__(self, "repeats", len(self.ratios))

    @property
    def median(self) -> float:
        return statistics.median(self.ratios)

    @property
    def spread(self) -> float:
        """max ÷ min of the per-repeat speedups."""
        return max(self.ratios) / min(self.ratios)

    @property
    def verdict(self) -> str:
        """"faster" or "slower" only when every repeat agrees; else "too close to call"."""
        if min(self.ratios) > 1.0:
            return "faster"
        if max(self.ratios) < 1.0:
            return "slower"
        return "too close to call"


def measure(pair: Any, s: RunSettings, repeats: int, stop: threading.Event, threads: int = 0) -> Measurement:
    """Both modes, ``repeats`` times, alternating which goes first, off-screen: the bench's
    own runner and reduction (:mod:`mtp_viz.cli.bench`, :mod:`mtp_viz.cli.bench_report`)."""
    from mtp_viz.cli.bench import Runner, Setting
    from mtp_viz.cli.bench_report import speedup_ratios
    from mtp_viz.sources.local import run_mode

    run_mode(pair, s, "speculative").close()  # every check of the prompt, no compute
    ids = pair.encode(s.prompt, s.chat)
    drafter = pair.make_drafter(s.drafter)
    setting = Setting(s.schedule, s.draft_tokens or drafter.default_draft_tokens)
    runner = Runner(pair, drafter, s.max_new_tokens, s.sampling, stale_kv=False,
                    max_draft_tokens=max(MAX_DRAFT_TOKENS, setting.gamma))
    records = []
    try:
        runner.autoregressive(ids, 4), runner.ours(ids, setting, 4)  # untimed warm-up
        for r in range(repeats):
            order = ("ours", "autoregressive") if r % 2 == 0 else ("autoregressive", "ours")
            for mode in order:
                if stop.is_set():
                    raise UserError("Measure was stopped.")
                rec, _ = runner.ours(ids, setting) if mode == "ours" else runner.autoregressive(ids)
                records.append(replace(rec, mode=mode, setting=setting.name if mode == "ours" else "", repeat=r))
    finally:
        runner.close()
    tps = {m: statistics.median(x.new_tokens / x.seconds for x in records if x.mode == m)
           for m in ("ours", "autoregressive")}
    return Measurement(tuple(speedup_ratios(records, "ours", setting.name)), tps["ours"],
                       tps["autoregressive"], threads)


__all__ = ["Measurement", "measure"]
