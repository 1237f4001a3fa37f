"""The server dashboard: vLLM's spec-decode counters over all traffic, as figures.

Pure: scrapes in (:class:`mtp_viz.sources.prometheus.SpecDecodeCounters`, fetched by
:func:`mtp_viz.sources.vllm.client.scrape`), plotly figures and one text line out; no gradio,
no network. A poller keeps a list of ``(seconds, counters)`` scrapes; the counters are
cumulative, so what happened between two scrapes is their difference:

    acceptance rate = Δaccepted ÷ Δdrafted        τ = 1 + Δaccepted ÷ Δsteps
"""
from __future__ import annotations

import html
from dataclasses import dataclass
from typing import Sequence

from mtp_viz.sources.prometheus import SpecDecodeCounters, delta

from .charts import COLORS, _figure

__all__ = ["Interval", "intervals", "position_figure", "rate_figure", "summary_line"]

Scrape = tuple[float, SpecDecodeCounters]   # (seconds on the poller's clock, counters)


@dataclass(frozen=True)
class Interval:
    """The traffic between two successive scrapes."""
    t: float                    # the later scrape's time
    steps: float                # verify steps with drafts
    drafted: float
    accepted: float
    rate: float | None          # accepted ÷ drafted (None: nothing drafted in between)
    tau: float | None           # tokens per verify step, bonus included
    cumulative_rate: float | None   # since the server started


def intervals(history: Sequence[Scrape]) -> list[Interval]:
    """One :class:`Interval` per pair of successive scrapes."""
    out = []
    for (_, before), (t, after) in zip(history, history[1:]):
        d = delta(after, before)
        out.append(Interval(t, d.drafts, d.draft_tokens, d.accepted_tokens, d.acceptance_rate,
                            d.mean_acceptance_length, after.acceptance_rate))
    return out


def position_figure(counters: SpecDecodeCounters, title: str = "Acceptance by draft position, all traffic"):
    """Per-position acceptance from the server's counters: the share of verify steps that
    kept draft k (bars, unconditional) and P(draft k kept | drafts before it kept) (line)."""
    unc, cond = counters.per_position(False), counters.per_position(True)
    data = []
    if counters.drafts:
        x = list(range(1, len(unc) + 1))
        kept = counters.accepted_per_pos
        data = [dict(type="bar", x=x, y=unc, name="steps that kept it",
                     marker=dict(color=COLORS["accepted"]),
                     hovertext=[f"position {k}: kept in {a:.0f} of {counters.drafts:.0f} steps"
                                for k, a in zip(x, kept)], hoverinfo="text"),
                dict(type="scatter", mode="lines+markers", x=x, y=cond, name="given the earlier kept",
                     line=dict(color="#6b7280", dash="dot"),
                     hovertext=[f"position {k}: {c:.0%} given drafts 1..{k - 1} kept" if c is not None
                                else f"position {k}: never reached" for k, c in zip(x, cond)],
                     hoverinfo="text")]
    empty = ("This server does not speculate." if not counters.enabled
             else "No drafts yet: send the server some traffic.")
    return _figure(title, data, xtitle="position in draft", ytitle="accepted", empty=empty,
                   yaxis=dict(range=[0, 1.05], tickformat=".0%"), xaxis=dict(dtick=1))


def rate_figure(history: Sequence[Scrape], title: str = "Acceptance rate over time, all traffic"):
    """Acceptance rate between successive scrapes (bars) and since the server started (line)."""
    rows = [r for r in intervals(history) if r.rate is not None]
    data = []
    if rows:
        x = [r.t for r in rows]
        data = [dict(type="bar", x=x, y=[r.rate for r in rows], name="between scrapes",
                     marker=dict(color=COLORS["accepted"]), opacity=0.55,
                     hovertext=[f"{r.accepted:.0f} of {r.drafted:.0f} drafts kept in {r.steps:.0f} "
                                f"steps, τ {r.tau:.2f}" for r in rows], hoverinfo="text"),
                dict(type="scatter", mode="lines+markers", x=x, y=[r.cumulative_rate for r in rows],
                     name="since the server started", line=dict(color="#064e3b", width=3),
                     hovertemplate="%{y:.0%} since start<extra></extra>")]
    return _figure(title, data, xtitle="seconds", ytitle="drafts accepted",
                   empty="Waiting for traffic: the chart fills as the server verifies drafts.",
                   yaxis=dict(range=[0, 1.05], tickformat=".0%"))


def summary_line(counters: SpecDecodeCounters) -> str:
    """One plain-text line (escape it before putting it in HTML: model names are the server's)."""
    if not counters.enabled:
        return "This server does not speculate (no vllm:spec_decode counters)."
    if not counters.drafts or not counters.draft_tokens:   # steps but no drafts: no rate to show
        return "No drafts verified yet."
    pos = " ".join(f"{p:.0%}" for p in counters.per_position(False) if p is not None)
    return (f"{counters.drafts:.0f} verify steps · {counters.draft_tokens:.0f} drafted · "
            f"{counters.accepted_tokens:.0f} accepted ({counters.acceptance_rate:.0%}) · "
            f"τ {counters.mean_acceptance_length:.2f} · kept by position {pos}")


def summary_html(url: str, history: list, every: float) -> str:
    """The server's totals (from the last of ``history``'s ``(seconds, counters)``) and
    how long it has been watched; escaped: text only."""
    t, counters = history[-1]
    return (f'<div class="mv-msg mv-msg-info">{html.escape(summary_line(counters))}'
            f'<br><small>{html.escape(url)} · {len(history)} scrapes over {t:.0f} s, every '
            f'{every:g} s</small></div>')
