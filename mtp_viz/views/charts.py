"""Pure chart functions: events in, plotly figures out (no gradio, no torch).

One figure per question a viewer asks: how often were drafts accepted (per step and
overall), how long were the drafts and why, how many tokens did each target forward
yield, how far into a draft does acceptance survive, and where did the time go. Every
figure function takes (speculative events, autoregressive events), so :data:`CHARTS`
calls them all alike; most read only the first.
"""
from __future__ import annotations

import html
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Sequence

from mtp_viz.engine.events import Event, Step

# why the experts chart is empty, when the run says why (Start.settings)
DENSE = "This pair is dense: every token uses the same weights, so there are no experts to count."
UNROUTED = "The {ran} does not report which experts its router chose,<br>so this run has no experts to count."
NOT_COUNTED = ("This mixture-of-experts run did not count its experts:<br>"
               "tick “Count experts” under More settings and run again.")
UNSAID = "This run did not record which experts its target used."
EXPERTS_PLOT = "experts-plot"  # shown on the page only for a mixture-of-experts pair

COLORS = {"accepted": "#059669", "rejected": "#dc2626", "correction": "#d97706",
          "extension": "#2563eb", "draft": "#7c3aed", "verify": "#0891b2", "ar": "#6b7280"}


def _figure(title: str, data: list[dict], *, xtitle: str, ytitle: str, empty: str = "", compact: bool = False,
            **layout):
    import plotly.graph_objects as go  # light (no torch); kept local so import stays cheap

    axis = dict(zeroline=False, showgrid=True, gridcolor="#eceff3", linecolor="#d1d5db",
                ticks="outside", tickcolor="#d1d5db", automargin=True)
    # template "none" plus explicit styling: the stock templates cost ~30 ms per figure
    base = dict(
        title=dict(text=title, font=dict(size=14), x=0.01, xanchor="left"),
        height=300, margin=dict(l=52, r=12, t=40, b=84), template="none",
        paper_bgcolor="white", plot_bgcolor="white",
        font=dict(size=12, color="#374151", family="DejaVu Sans, Arial, sans-serif"),
        xaxis=dict(title=dict(text=xtitle), **axis), yaxis=dict(title=dict(text=ytitle), **axis),
        legend=dict(orientation="h", yanchor="top", y=-0.3, xanchor="left", x=0.0),
        hovermode="closest", bargap=0.15, hoverlabel=dict(bgcolor="white"),
    )
    if compact:  # a live chart beside the panes: shorter, its legend on the title's line
        base.update(height=170, margin=dict(l=48, r=8, t=30, b=36),
                    legend=dict(orientation="h", yanchor="bottom", y=1.02, xanchor="right", x=1.0, font=dict(size=11)))
        base["title"]["font"] = dict(size=13)
        base["xaxis"]["title"]["standoff"] = 4
    if not data:
        base["annotations"] = [dict(text=empty or "Run a prompt to fill this chart.", showarrow=False,
                                    xref="paper", yref="paper", x=0.5, y=0.5,
                                    font=dict(size=13, color="#6b7280"))]
        base["xaxis"]["visible"] = base["yaxis"]["visible"] = False
    for k, v in layout.items():
        base[k] = {**base[k], **v} if isinstance(v, dict) and isinstance(base.get(k), dict) else v
    return go.Figure(data=data, layout=base, _validate=False)  # inputs are ours; skip ~80% of the cost


def spec_steps(events: Iterable[Event]) -> list[Step]:
    """The step summaries of a speculative run (an autoregressive run has none that count)."""
    return [e for e in events if isinstance(e, Step)]


def acceptance_figure(events: Sequence[Event], ar_events: Sequence[Event] = ()):
    """Share of drafts accepted per step (bars) and cumulative (line)."""
    steps = [s for s in spec_steps(events) if s.draft_tokens > 0]
    data = []
    if steps:
        x = [s.step for s in steps]
        rate = [s.accepted / s.draft_tokens for s in steps]
        cum, a, d = [], 0, 0
        for s in steps:
            a, d = a + s.accepted, d + s.draft_tokens
            cum.append(a / d)
        text = [f"step {s.step}: {s.accepted}/{s.draft_tokens} accepted" for s in steps]
        data = [dict(type="bar", x=x, y=rate, name="this step", marker=dict(color=COLORS["accepted"]),
                     opacity=0.55, hovertext=text, hoverinfo="text"),
                dict(type="scatter", mode="lines", x=x, y=cum, name="cumulative",
                     line=dict(color="#064e3b", width=3),
                     hovertemplate="cumulative %{y:.0%} after step %{x}<extra></extra>")]
    return _figure("Acceptance rate per step", data, xtitle="verification step",
                   ytitle="drafts accepted", compact=True, yaxis=dict(range=[0, 1.05], tickformat=".0%"))


def draft_length_figure(events: Sequence[Event], ar_events: Sequence[Event] = ()):
    """Draft length per step; hover tells why the schedule changed it."""
    steps = spec_steps(events)
    data = []
    if steps:
        x = [s.step for s in steps]
        # a trace's reason and cut are anyone's text: escaped, since plotly reads tags in hover text
        why = ["first step"] + [f"step {p.step}: {html.escape(p.reason or 'schedule')}" for p in steps[:-1]]
        hover = [f"step {s.step}: drafted {s.draft_tokens}, accepted {s.accepted}<br>length set by {w}"
                 + (f"<br>cut by {html.escape(s.cut)}" if s.cut else "") for s, w in zip(steps, why)]
        data = [dict(type="bar", x=x, y=[s.accepted for s in steps], name="accepted",
                     marker=dict(color=COLORS["accepted"]), opacity=0.45, hoverinfo="skip"),
                dict(type="scatter", mode="lines+markers", x=x, y=[s.draft_tokens for s in steps],
                     name="draft length", line=dict(color=COLORS["draft"], shape="hv", width=2.5),
                     marker=dict(size=7), hovertext=hover, hoverinfo="text")]
    return _figure("Draft length per step", data, xtitle="verification step", ytitle="tokens", compact=True,
                   yaxis=dict(rangemode="tozero", dtick=1), barmode="overlay")


def tau_figure(events: Sequence[Event], ar_events: Sequence[Event] = ()):
    """New tokens per target forward; autoregressive decoding is always 1."""
    steps = spec_steps(events)
    data = []
    if steps:
        x = [s.step for s in steps]
        mean, total = [], 0
        for i, s in enumerate(steps, 1):
            total += s.new_tokens
            mean.append(total / i)
        data = [dict(type="bar", x=x, y=[s.new_tokens for s in steps], name="this forward",
                     marker=dict(color=COLORS["extension"]), opacity=0.55,
                     hovertemplate="step %{x}: %{y} tokens<extra></extra>"),
                dict(type="scatter", mode="lines", x=x, y=mean, name="mean",
                     line=dict(color="#1e3a8a", width=3),
                     hovertemplate="mean %{y:.2f} after step %{x}<extra></extra>"),
                dict(type="scatter", mode="lines", x=[x[0], x[-1]], y=[1, 1], name="autoregressive",
                     line=dict(color=COLORS["ar"], dash="dash"), hoverinfo="skip")]
    return _figure("Tokens per target forward", data, xtitle="verification step", ytitle="tokens",
                   yaxis=dict(rangemode="tozero"))


def position_figure(events: Sequence[Event], ar_events: Sequence[Event] = ()):
    """Acceptance at each draft position: given it was reached (earlier drafts all
    accepted), and given it was drafted."""
    from mtp_viz.analysis.metrics import per_position_counts  # pure, torch-free

    counts = [(k + 1, d, r, a) for k, (d, r, a) in enumerate(per_position_counts(events)) if d]
    data = []
    if counts:
        x = [k for k, *_ in counts]
        data = [dict(type="bar", x=x, y=[a / r if r else None for _, _, r, a in counts],
                     marker=dict(color=COLORS["accepted"]), name="given reached",
                     hovertext=[f"position {k}: {a} accepted of {r} reached" for k, _, r, a in counts],
                     hoverinfo="text"),
                dict(type="scatter", mode="lines+markers", x=x, y=[a / d for _, d, _, a in counts],
                     name="given drafted", line=dict(color="#6b7280", dash="dot"),
                     hovertext=[f"position {k}: {a} accepted of {d} drafted" for k, d, _, a in counts],
                     hoverinfo="text")]
    return _figure("Acceptance by draft position", data, xtitle="position in draft",
                   ytitle="accepted", yaxis=dict(range=[0, 1.05], tickformat=".0%"),
                   xaxis=dict(dtick=1))


def timing_figure(events: Sequence[Event], ar_events: Sequence[Event] = ()):
    """Drafting vs verification time per step, against one autoregressive forward."""
    steps = spec_steps(events)
    timed = any(s.draft_seconds or s.verify_seconds for s in steps)
    data = []
    if timed:
        x = [s.step for s in steps]
        data = [dict(type="bar", x=x, y=[1000 * s.draft_seconds for s in steps], name="draft",
                     marker=dict(color=COLORS["draft"]),
                     hovertemplate="step %{x}: draft %{y:.1f} ms<extra></extra>"),
                dict(type="bar", x=x, y=[1000 * s.verify_seconds for s in steps], name="verify",
                     marker=dict(color=COLORS["verify"]),
                     hovertemplate="step %{x}: verify %{y:.1f} ms<extra></extra>")]
        ar = [s.verify_seconds + s.draft_seconds for s in spec_steps(ar_events)]
        if ar:
            ms = 1000 * sorted(ar)[len(ar) // 2]
            data.append(dict(type="scatter", mode="lines", x=[x[0], x[-1]], y=[ms, ms],
                             name="autoregressive",
                             line=dict(color=COLORS["ar"], dash="dash"),
                             hovertemplate="autoregressive forward %{y:.1f} ms<extra></extra>"))
    untimed = "This source reports no draft or verify times<br>(a vLLM server does not)."
    return _figure("Draft vs verify time per step", data, xtitle="verification step", ytitle="ms",
                   empty=untimed if steps else "", barmode="stack")


def experts_figure(events: Sequence[Event], ar_events: Sequence[Event] = ()):
    """Distinct experts per layer that each verification touched, against its draft
    length, beside the top-k one plain token reads and the most γ + 1 tokens could reach."""
    from mtp_viz.analysis import experts  # pure, torch-free

    run = events or ar_events
    moe, steps = experts.moe_of(run), experts.expert_steps(events)
    data = []
    if moe and steps:
        k, total = moe["top_k"], moe["num_experts"]
        means = experts.mean_by_draft_length(steps)
        xs = list(range(0, max(means) + 1))
        data = [dict(type="scatter", mode="markers", x=[s.draft_tokens for s in steps], y=[s.mean for s in steps],
                     name="a verification", marker=dict(color=COLORS["verify"], size=8, opacity=0.45),
                     hovertext=[f"step {s.step}: {s.draft_tokens} drafts<br>experts per layer: "
                                f"{', '.join(map(str, s.per_layer))}" for s in steps], hoverinfo="text"),
                dict(type="scatter", mode="lines+markers", x=list(means), y=list(means.values()),
                     name="mean", line=dict(color="#155e75", width=3),
                     hovertemplate="%{x} drafts: %{y:.2f} experts per layer<extra></extra>"),
                dict(type="scatter", mode="lines", x=xs, y=[experts.ceiling(g, k, total) for g in xs],
                     name=f"at most (top-{k} each, {total} in all)", line=dict(color="#9ca3af", dash="dot"),
                     hoverinfo="skip"),
                dict(type="scatter", mode="lines", x=[xs[0], xs[-1]], y=[k, k], name=f"one plain token: top-{k}",
                     line=dict(color=COLORS["ar"], dash="dash"), hoverinfo="skip")]
    unrouted = experts.unrouted(run) if run else ""
    empty = ("" if not run else UNROUTED.format(ran=unrouted) if unrouted else UNSAID if moe is None else
             DENSE if not moe else NOT_COUNTED if not moe.get("counted") else "")
    return _figure("Experts touched per verification", data, xtitle="drafts verified (γ)",
                   ytitle="distinct experts per layer", empty=empty,
                   yaxis=dict(rangemode="tozero"), xaxis=dict(dtick=1))


@dataclass(frozen=True)
class Chart:
    """One chart of a run. :data:`CHARTS` is the only list of them: the page's plots and
    their rows, the frames' slots, the ⓘ explanations, the live subset and the exported
    page all come from it, so adding a chart is one entry there."""
    id: str                # the element id of its plot, its slot in frames, its key in EXPLAIN
    title: str             # the ⓘ explanation: a title...
    explanation: str       # ...and two sentences
    figure: Callable[[Sequence[Event], Sequence[Event]], Any]  # (speculative, autoregressive) -> figure
    live: bool = False     # redrawn while a run streams (from the speculative run so far)
    row: int = 0           # 0: beside the panes on the first tab (stacked); 1, 2…: rows of "Inside a step"


CHARTS: tuple[Chart, ...] = (
    Chart("acceptance-plot", "Acceptance rate per step",
          "For each verification step, the share of that step's drafts the target kept. "
          "Steps at 100% are where the drafter guessed everything right.",
          acceptance_figure, live=True, row=0),
    Chart("draft-length-plot", "Draft length per step",
          "How many tokens the drafter proposed at each step, as the draft-length schedule "
          "chose. A constant schedule draws a flat line; adaptive ones rise after full "
          "acceptance and fall after rejections.",
          draft_length_figure, live=True, row=0),
    Chart("tokens-per-forward-plot", "Tokens per target forward",
          "How many tokens each target forward produced: accepted drafts plus the "
          "target's own token. Plain decoding is always 1; this number (τ) is where "
          "any speedup comes from.",
          tau_figure, row=1),
    Chart("position-plot", "Acceptance by draft position",
          "How often the 1st, 2nd, 3rd… draft of a step was accepted. Later drafts build on "
          "earlier guesses and the drafter sees the target's state only once per step, so "
          "acceptance usually falls with position.",
          position_figure, row=1),
    Chart("timing-plot", "Draft vs verify time per step",
          "Time spent drafting and verifying in each step, beside one plain decoding step. "
          "Drafting must stay cheap relative to the target (the cost coefficient c) or the saved "
          "forwards are spent again.",
          timing_figure, row=1),
    Chart(EXPERTS_PLOT, "Experts touched per verification",
          "One plain decoding step of a mixture-of-experts target (the 26B-A4B) reads top-k experts per "
          "layer; a verification of γ drafts sends γ+1 tokens, which may reach up to (γ+1)·top-k different "
          "experts. Every expert reached must be read from memory, which is why verifying drafts can cost a "
          "mixture of experts more than a dense model, where all tokens use the same weights.",
          experts_figure, row=2),
)


def all_figures(spec: Sequence[Event], ar: Sequence[Event] = ()) -> dict:
    """Every chart, by the elem_id it is shown under."""
    return {c.id: c.figure(spec, ar) for c in CHARTS}


def live_figures(spec: Sequence[Event], ar: Sequence[Event] = ()) -> dict:
    """The charts drawn while a run streams (re-sent whole, so only the cheap, telling few)."""
    return {c.id: c.figure(spec, ar) for c in CHARTS if c.live}


def rows() -> list[list[Chart]]:
    """The charts by row of the page, top first."""
    return [[c for c in CHARTS if c.row == r] for r in sorted({c.row for c in CHARTS})]
