"""A frame: one update of the page's run outputs, as a typed value.

Handlers yield frames; the page turns each into its outputs list (a part left ``None``
stays as it is on the page). :func:`cleared` is the one empty page a new run, a trace
replay or a vLLM run starts from; ``last`` marks a run's closing frame (its charts,
speedup and theory panel are final).
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Mapping

from . import charts, stats, tokens

PANE = {"speculative": "spec", "autoregressive": "ar"}  # the pane (and "<pane>_stats") of each mode


@dataclass(frozen=True)
class Frame:
    status: str | None = None       # #status: what the run is doing, or its one-sentence error
    caption: str | None = None      # #step-caption: step mode's account of the last phase
    spec: str | None = None         # the speculative pane's tokens
    spec_stats: str | None = None
    ar: str | None = None           # the autoregressive baseline's pane
    ar_stats: str | None = None
    compare: str | None = None      # the speedup badge and identity check
    theory: str | None = None       # measured vs theory
    measured: str | None = None     # #measure-result: Measure's result, on the Measure tab
    model_status: str | None = None  # #model-status: where the pair stands (loading, compiling, ready)
    figures: Mapping[str, Any] = field(default_factory=dict)  # chart id (charts.CHARTS) -> figure
    last: bool = False              # the run's closing frame

    def __or__(self, other: "Frame") -> "Frame":
        """This frame updated by ``other``'s parts (its figures added to these)."""
        parts = {f.name: getattr(other, f.name) for f in dataclasses.fields(self)
                 if f.name not in ("figures", "last") and getattr(other, f.name) is not None}
        return dataclasses.replace(self, **parts, figures={**self.figures, **other.figures},
                                   last=self.last or other.last)

    def parts(self) -> list[Any]:
        """The frame as the page's outputs, in :data:`OUTPUTS` order: each text part, then
        each chart's figure; None where the frame leaves that output as it is (the page
        says "keep" in its UI library's own way: :func:`mtp_viz.app.handlers.frames.outputs`)."""
        return [getattr(self, s) for s in SLOTS] + [self.figures.get(c) for c in PLOTS]

    def shown(self) -> set[str]:
        """The parts this frame changes (chart ids for its figures)."""
        return {f.name for f in dataclasses.fields(self) if f.name not in ("figures", "last")
                and getattr(self, f.name) is not None} | set(self.figures)


# The outputs a frame fills, in the page's order: its text parts, then every chart.
SLOTS = tuple(f.name for f in dataclasses.fields(Frame) if f.name not in ("figures", "last"))
PLOTS = tuple(c.id for c in charts.CHARTS)
OUTPUTS = SLOTS + PLOTS  # Frame.parts' order; the page adds the session and Race replay's button


def cleared(spec: str, ar: str, figures: Mapping[str, Any], *, caption: str = "",
            status: str | None = None) -> Frame:
    """The page before a run's first event: placeholders (these texts) in both panes,
    empty stats, speedup and theory, and ``figures``, every chart empty
    (``charts.all_figures([])``, built once by the caller and shared)."""
    empty = stats.stats_html(stats.RunStats())
    return Frame(status=status, caption=caption, spec=tokens.placeholder_html(spec),
                 ar=tokens.placeholder_html(ar), spec_stats=empty, ar_stats=empty,
                 compare=stats.compare_html(stats.RunStats(), stats.RunStats(), greedy=True),
                 theory="", figures=figures)


__all__ = ["Frame", "OUTPUTS", "PANE", "PLOTS", "SLOTS", "cleared"]
