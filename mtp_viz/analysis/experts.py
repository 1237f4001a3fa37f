"""Experts touched per verification: pure functions over a run's events.

A mixture-of-experts target counted with ``experts=True`` (:mod:`mtp_viz.engine.experts`)
carries on every ``step`` event ``experts_per_layer``: per MoE layer, the distinct
experts that step's target forward sent its tokens to. One plain decoding step sends
one token, so each layer reads top_k experts; a verification of γ drafts sends γ + 1
tokens, which read at most min(num_experts, top_k·(γ + 1)). What the run's
``Start.settings["experts"]`` says of the target (:func:`moe_of`) tells a view why
there may be nothing to count.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Sequence

from mtp_viz.engine.events import Event, Start, Step

__all__ = ["ExpertStep", "expert_steps", "mean_by_draft_length", "moe_of", "unrouted", "ceiling"]


@dataclass(frozen=True)
class ExpertStep:
    """One verification (or plain step) of a counted run."""
    step: int
    draft_tokens: int
    per_layer: tuple[int, ...]     # distinct experts per MoE layer

    @property
    def mean(self) -> float:
        """Distinct experts per layer, averaged over the layers."""
        return sum(self.per_layer) / len(self.per_layer)


def _start(events: Sequence[Event]) -> Start | None:
    return next((e for e in events if isinstance(e, Start)), None)


def moe_of(events: Sequence[Event]) -> dict | None:
    """What the run says of its target: None when it says nothing (a vLLM server,
    transformers' recorded generate, a trace from before experts were counted), {} for a
    dense target, else ``{"layers", "num_experts", "top_k", "counted"}``."""
    start = _start(events)
    return None if start is None else start.settings.get("experts")


def unrouted(events: Sequence[Event]) -> str:
    """What ran, named, when its source cannot report which experts its router chose
    (a server); "" when it can."""
    start = _start(events)
    return start.ran.label if start is not None and not start.ran.routing else ""


def expert_steps(events: Iterable[Event]) -> list[ExpertStep]:
    """The counted steps after each generation's prefill (which sends the whole prompt,
    not a verification's γ + 1 tokens), in order."""
    return [ExpertStep(e.step, e.draft_tokens, e.experts_per_layer) for e in events
            if isinstance(e, Step) and e.experts_per_layer and e.step > 1]


def mean_by_draft_length(steps: Sequence[ExpertStep]) -> dict[int, float]:
    """Draft length γ -> distinct experts per layer, averaged over its steps and layers."""
    pooled: dict[int, list[float]] = {}
    for s in steps:
        pooled.setdefault(s.draft_tokens, []).append(s.mean)
    return {g: sum(v) / len(v) for g, v in sorted(pooled.items())}


def ceiling(draft_tokens: int, top_k: int, num_experts: int) -> int:
    """The most experts γ + 1 tokens can reach in one layer: every token top_k of its own."""
    return min(num_experts, top_k * (draft_tokens + 1))
