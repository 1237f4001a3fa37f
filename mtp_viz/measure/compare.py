"""Measure: N interleaved repeats of both modes, off-screen, through the bench's own
runner and reduction, so the app's considered figure (and a notebook's) is the bench's
figure."""
from __future__ import annotations

import dataclasses
import statistics
import threading
from dataclasses import dataclass, field
from typing import Any

from mtp_viz.errors import UserError
from mtp_viz.sources.base import WARM_UP_TOKENS
from mtp_viz.sources.settings import RunSettings

from .records import AUTOREGRESSIVE, SPECULATIVE, Setting
from .reduce import speedup_ratios, verdict
from .runner import Runner


@dataclass(frozen=True)
class Measurement:
    """N interleaved repeats of both modes, reduced as ``mtp-viz bench`` reduces them."""
    ratios: tuple[float, ...]          # per repeat: speculative tokens/s ÷ autoregressive
    spec_tps: float                    # medians over repeats
    ar_tps: float
    threads: int
    clock: str = "wall"                # what the runs' seconds read: "cpu" (the engine thread's) or "wall"
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
        return verdict(self.ratios)


def measure(pair: Any, s: RunSettings, repeats: int, stop: threading.Event | None = None) -> Measurement:
    """Both modes of ``s`` on ``pair``, ``repeats`` times, alternating which goes first,
    off-screen: the bench's own runner, clock and reduction, after the untimed warm-up
    every surface makes. Setting ``stop`` ends it with one sentence."""
    import torch
    base = dataclasses.replace(s, top=0, experts=False, stale_kv=False)  # timed as the bench times: no extras
    runner = Runner(pair, base)
    setting = Setting(s.schedule, s.draft_tokens or runner.drafter.default_draft_tokens)
    records = []
    try:
        for mode in (AUTOREGRESSIVE, SPECULATIVE):  # untimed warm-up; checks the prompt as every run does
            runner.run(mode, s.prompt, setting if mode == SPECULATIVE else None, WARM_UP_TOKENS)
        for r in range(repeats):
            for mode in (SPECULATIVE, AUTOREGRESSIVE) if r % 2 == 0 else (AUTOREGRESSIVE, SPECULATIVE):
                if stop is not None and stop.is_set():
                    raise UserError("Measure was stopped.")
                rec, _ = runner.run(mode, s.prompt, setting if mode == SPECULATIVE else None)
                records.append(dataclasses.replace(rec, repeat=r))
    finally:
        runner.close()
    tps = {m: statistics.median(x.new_tokens / x.seconds for x in records if x.mode == m)
           for m in (SPECULATIVE, AUTOREGRESSIVE)}
    return Measurement(tuple(speedup_ratios(records, SPECULATIVE, setting.name)), tps[SPECULATIVE],
                       tps[AUTOREGRESSIVE], torch.get_num_threads(), records[0].clock)


__all__ = ["Measurement", "measure"]
