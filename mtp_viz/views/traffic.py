"""A traffic sweep's charts: speedup, throughput and acceptance against concurrency
(plotly figures from :class:`mtp_viz.measure.traffic.TrafficRow` rows, or anything with
their fields): the app's Traffic panel and the bench's HTML report draw the same three."""
from __future__ import annotations

from typing import Any, Sequence

WAITING = "Waiting for a sweep: give both servers and press Sweep;<br>the chart fills level by level."


def figures(rows: Sequence[Any]) -> list:
    """Speedup, throughput and acceptance against concurrency (plotly figures)."""
    import plotly.graph_objects as go
    by = {s: sorted((r for r in rows if r.server == s), key=lambda r: r.concurrency)
          for s in ("speculative", "baseline")}
    spec = by["speculative"]

    def fig(title, data, ytitle, yrange=None, shapes=()):
        layout = dict(
            title=dict(text=title, x=0.01, xanchor="left", font=dict(size=14)), height=300,
            margin=dict(l=56, r=12, t=40, b=48), template="none", shapes=list(shapes),
            legend=dict(orientation="h", y=-0.25), xaxis=dict(title=dict(text="concurrent requests"), type="log",
                                                              tickvals=[r.concurrency for r in spec]),
            yaxis=dict(title=dict(text=ytitle), range=yrange))
        if not spec:  # before a sweep: say what fills the chart, not an empty axis from -1 to 4
            layout.update(shapes=[], annotations=[dict(text=WAITING, showarrow=False, xref="paper", yref="paper",
                                                       x=0.5, y=0.5, font=dict(size=13, color="#6b7280"))])
            layout["xaxis"]["visible"] = layout["yaxis"]["visible"] = False
        return go.Figure(data=data, layout=layout, _validate=False)
    x = [r.concurrency for r in spec]
    line = lambda xs, ys, name, **kw: dict(type="scatter", mode="lines+markers", x=xs, y=ys, name=name, **kw)  # noqa: E731
    speedup = fig("Speedup: speculative ÷ baseline", [
        line(x, [r.speedup for r in spec], "throughput"),
        line(x, [r.tpot_ratio for r in spec], "per-user speed (baseline TPOT ÷ speculative TPOT)",
             line=dict(dash="dot"))],
        "× baseline", shapes=[dict(type="line", xref="paper", x0=0, x1=1, y0=1, y1=1,
                                   line=dict(color="#9ca3af", dash="dash"))])
    throughput = fig("Output throughput", [line([r.concurrency for r in by[s]],
                                                [r.tokens_per_second for r in by[s]], s) for s in by], "tokens/s")
    acceptance = fig("Acceptance on the speculating server",
                     [line(x, [r.acceptance_rate for r in spec], "accepted ÷ drafted")], "acceptance", [0, 1])
    return [speedup, throughput, acceptance]


__all__ = ["WAITING", "figures"]
