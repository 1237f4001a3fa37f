"""Decoding settings: pure data, no torch, so the app can check them before a run.

:class:`Sampling` is what :class:`mtp_viz.engine.sampling.Sampler` honours; ``validate`` is
the one place its ranges are checked, for the engine, the CLI, the API and the app.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

MAX_SEED = 2**63 - 1  # torch.Generator.manual_seed takes a 64-bit integer; we keep it signed
# The longest draft, one cap everywhere: what a run may ask for (sources.settings checks it),
# speculative()'s and every schedule's cap, and the room a run's cache keeps for one verification
# (engine.theory, pure formulas that import nothing, writes the same 16 as its default cap)
MAX_DRAFT_TOKENS = 16


@dataclass(frozen=True)
class Sampling:
    temperature: float = 0.0   # 0 means greedy
    top_k: int = 0             # 0 disables
    top_p: float = 1.0         # 1 disables
    seed: int | None = None    # seeds an explicit torch.Generator; None draws a fresh seed

    @property
    def greedy(self) -> bool:
        return self.temperature <= 0.0

    def validate(self) -> None:
        """Raise ValueError (one sentence) for settings the sampler cannot honour.

        NaN fails every comparison, so each check is written to reject it."""
        if not (math.isfinite(self.temperature) and self.temperature >= 0):
            raise ValueError("Temperature must be a finite number, 0 (greedy) or positive.")
        if not (math.isfinite(self.top_p) and 0.0 < self.top_p <= 1.0):
            raise ValueError("Top-p must be a number in (0, 1].")
        if isinstance(self.top_k, bool) or not isinstance(self.top_k, int) or self.top_k < 0:
            raise ValueError("Top-k must be a whole number, 0 (off) or positive.")
        if self.seed is not None and (isinstance(self.seed, bool) or not isinstance(self.seed, int)
                                      or not 0 <= self.seed <= MAX_SEED):
            raise ValueError(f"The seed must be a whole number from 0 to {MAX_SEED}.")

    def as_dict(self) -> dict:
        return {"temperature": self.temperature, "top_k": self.top_k, "top_p": self.top_p,
                "seed": self.seed}
