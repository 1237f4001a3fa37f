"""A run as a notebook cell's output: the app's token spans (same kinds, colours and
shapes, from :mod:`.tokens`) and its stats line, under the app's own stylesheet. Pure:
events in, HTML out; :mod:`mtp_viz.notebook` puts it on the page."""
from __future__ import annotations

import html
import sys
from typing import Sequence

from mtp_viz.engine.events import Done, Error, Event, Start

from . import stats, tokens

_CELL_CSS = """
.mv-nb-side { display: grid; grid-template-columns: 1fr 1fr; gap: 12px; }
.mv-nb-side h4 { margin: 0 0 4px; font-size: 0.95rem; }
.mv-notebook { font-family: system-ui, sans-serif; color: #111827; max-width: 960px; }
.mv-notebook .mv-nb-head { font-size: 0.85rem; color: #4b5563; margin: 0 0 4px; }
.mv-notebook .mv-text { border: 1px solid #e5e7eb; border-radius: 8px; padding: 8px 10px; }
"""


def in_notebook() -> bool:
    """Whether this process is a notebook kernel (Jupyter, VS Code, Colab) that can
    show HTML, rather than a terminal (plain ``python`` or the ``ipython`` shell): where
    the notebook draws cells and ``mtp_viz.launch`` puts the app inline. Reads
    ``sys.modules`` only, so it never imports IPython."""
    ipython = sys.modules.get("IPython")
    shell = ipython.get_ipython() if ipython is not None else None
    return shell is not None and (hasattr(shell, "kernel") or "google.colab" in sys.modules)


def cell_html(events: Sequence[Event], *, css: str = "", legend: bool = True,
              baseline: Sequence[Event] | None = None) -> str:
    """One run so far: what it is, the legend, the tokens (a pending draft last) and
    the stats line; an error event as its sentence. ``baseline``: the plain run that
    took turns with it, drawn as the app's speedup badge once both are done."""
    start = next((e for e in events if isinstance(e, Start)), None)
    error = next((e for e in events if isinstance(e, Error)), None)
    done = any(isinstance(e, Done) for e in events)
    head = "Waiting for the first event…" if start is None else (
        f"{html.escape(start.mode)} · prompt {start.prompt_tokens} tokens"
        + (f" · drafter {html.escape(str(start.settings['drafter']))}" if start.settings.get("drafter") else "")
        + ("" if done or error else " · running"))
    body = tokens.tokens_html(events, placeholder="Tokens appear here.")
    tail = tokens.message_html(error.message, level="error") if error else stats.stats_html(stats.run_stats(events))
    if baseline and not error and done:
        greedy = not float(start.settings.get("temperature") or 0.0)
        tail += stats.compare_html(stats.run_stats(events), stats.run_stats(baseline), greedy=greedy)
    return (f'<div class="mv-notebook"><style>{css}{_CELL_CSS}</style><p class="mv-nb-head">{head}</p>'
            f'{tokens.legend_html() if legend else ""}{body}{tail}</div>')


def side_by_side_html(runs: dict[str, Sequence[Event]], *, css: str = "") -> str:
    """Named runs of the same prompt next to each other (transformers' recorded call
    beside mtp-viz's engine, say), each with its own tokens and stats line."""
    cols = "".join(f'<div><h4>{html.escape(name)}</h4>{cell_html(events, legend=False)}</div>'
                   for name, events in runs.items())
    return (f'<div class="mv-notebook"><style>{css}{_CELL_CSS}</style>{tokens.legend_html()}'
            f'<div class="mv-nb-side">{cols}</div></div>')


# plotly.js in a notebook: the id of the one script element that carries it on a page
# (:func:`plotlyjs_html`'s, or the one :func:`chart_html` adds from plotly's CDN)
PLOTLYJS_ID = "mtp-viz-plotlyjs"
NO_PLOTLYJS = ("This chart needs plotly.js, which could not be loaded (offline?): run "
               "mtp_viz.notebook.embed_plotlyjs() once near the top of the notebook to carry it inside.")

# Draws one chart with the page's plotly.js: the one already there (window.Plotly), else
# the one script element with PLOTLYJS_ID, added from plotly's CDN by the first chart that
# finds none, so a page loads plotly.js once however many charts it holds. A page that
# cannot load it (offline, no embed_plotlyjs) says so where the chart would be.
_LOADER = """(function () {
  var id = %(id)s, tag = %(tag)s, fig = %(fig)s;
  function draw() { window.Plotly.newPlot(id, fig.data, fig.layout, {responsive: true}); }
  function failed() { var d = document.getElementById(id); if (d) d.textContent = %(failed)s; }
  if (window.Plotly) return draw();
  var s = document.getElementById(tag);
  if (s && s.getAttribute("data-state") === "failed") return failed();
  if (!s) {
    s = document.createElement("script");
    s.id = tag; s.src = %(src)s; s.charset = "utf-8";
    s.addEventListener("error", function () { s.setAttribute("data-state", "failed"); });
    document.head.appendChild(s);
  }
  s.addEventListener("load", function () { window.Plotly ? draw() : failed(); });
  s.addEventListener("error", failed);
})();"""


def chart_html(fig: dict, div_id: str) -> str:
    """One chart (a figure's dict, as :meth:`plotly.graph_objects.Figure.to_dict` gives
    it) as a small HTML fragment that draws with the page's one copy of plotly.js
    (``_LOADER``): a notebook's text/html fallback, a few KB instead of plotly.js's 4.8 MB."""
    import json

    from plotly.io.json import to_json_plotly
    from plotly.offline import get_plotlyjs_version
    src = f"https://cdn.plot.ly/plotly-{get_plotlyjs_version()}.min.js"
    script = _LOADER % {  # to_json_plotly escapes <, > and / : no text of the run can close the script
        "id": json.dumps(div_id), "tag": json.dumps(PLOTLYJS_ID), "src": json.dumps(src),
        "fig": to_json_plotly({"data": fig.get("data", []), "layout": fig.get("layout", {})}),
        "failed": json.dumps(NO_PLOTLYJS)}
    height = int(fig.get("layout", {}).get("height") or 360)
    return (f'<div id="{html.escape(div_id)}" class="plotly-graph-div mv-nb-chart" '
            f'style="height:{height}px; width:100%;"></div><script>{script}</script>')


def plotlyjs_html() -> str:
    """The installed plotly's plotly.js as one script element with ``PLOTLYJS_ID``, for a
    page that must draw charts offline (:func:`mtp_viz.notebook.embed_plotlyjs`), with
    one line saying what it is."""
    from plotly.offline import get_plotlyjs, get_plotlyjs_version
    return (f'<script id="{PLOTLYJS_ID}" data-state="embedded">window.PlotlyConfig = {{MathJaxConfig: "local"}};'
            f'{get_plotlyjs()}</script><p class="mv-nb-head" style="font-size:0.85rem;color:#4b5563">'
            f'plotly.js {get_plotlyjs_version()} is in this notebook: its charts draw offline, '
            f'in classic Notebook and nbconvert pages too.</p>')


__all__ = ["NO_PLOTLYJS", "PLOTLYJS_ID", "cell_html", "chart_html", "in_notebook", "plotlyjs_html",
           "side_by_side_html"]
