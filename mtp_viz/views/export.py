"""Exports of a run: a self-contained HTML page (tokens, legend, speedup, charts) that
opens offline, and the per-step metrics as CSV. Pure functions of the events, plus
:class:`Downloads`, the bounded folder the app writes download files into.

Charts as PNG come from each chart's own toolbar (its camera button), in the browser.
"""
from __future__ import annotations

import csv
import html
import io
import shutil
import tempfile
import threading
import uuid
from pathlib import Path
from typing import Sequence

from mtp_viz.engine.events import Done, Event, Start, Step

from . import charts, stats, tokens

CSV_COLUMNS = ("mode", "step", "draft_tokens", "accepted", "rejected", "new_tokens", "draft_ms", "verify_ms",
               "t_s", "next_draft_tokens", "reason", "cut")
# A spreadsheet runs a cell that starts with one of these as a formula; a trace's text
# is anyone's, so its cells get a leading quote (the usual CSV-injection defence).
_FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\n")


def _text_cell(text: str) -> str:
    """A text cell that a spreadsheet shows as text. Line breaks become ``\n``, which
    the writer quotes (a bare ``\r`` it leaves unquoted, and a spreadsheet would start a
    new row there, whose first cell could be a formula). The numeric columns are the
    project's own numbers and are written as they are (a negative number stays one)."""
    text = text.replace("\r\n", "\n").replace("\r", "\n")
    return "'" + text if text.startswith(_FORMULA_STARTS) else text


def steps_csv(spec: Sequence[Event], ar: Sequence[Event] = ()) -> str:
    """One row per step of each run (speculative first): what was drafted, kept and
    added, and the step's own timings. ``rejected`` counts every draft not kept (the
    first disagreement and all drafted after it). The timings are empty for a run whose
    source reports none (a vLLM server)."""
    out = io.StringIO()
    w = csv.writer(out, lineterminator="\n")
    w.writerow(CSV_COLUMNS)
    for events in (spec, ar):
        mode = next((e.mode for e in events if isinstance(e, Start)), "")
        steps = [e for e in events if isinstance(e, Step)]
        timed = any(e.draft_seconds or e.verify_seconds for e in steps)
        for e in steps:
            ms = [f"{e.draft_seconds * 1000:.3f}", f"{e.verify_seconds * 1000:.3f}"] if timed else ["", ""]
            w.writerow([_text_cell(mode), e.step, e.draft_tokens, e.accepted, e.draft_tokens - e.accepted,
                        e.new_tokens, *ms, f"{e.t:.6f}", e.next_draft_tokens, _text_cell(e.reason),
                        _text_cell(e.cut)])
    return out.getvalue()


def stylesheet() -> str:
    """The app's stylesheet (``assets/app.css``): the page's, and inlined into exported pages."""
    from mtp_viz.paths import assets_dir
    return (assets_dir() / "app.css").read_text(encoding="utf-8")


def page_html(spec: Sequence[Event], ar: Sequence[Event] = (), *, greedy: bool = True, css: str = "",
              title: str = "mtp-viz run") -> str:
    """A whole HTML document of the run that needs nothing else: the token panes, the
    legend, the speedup line and every chart, with plotly.js inlined once."""
    figures = charts.all_figures(spec, ar)
    plots = "".join(f'<div class="mv-export-plot">{_figure_html(fig, i == 0)}</div>'
                    for i, fig in enumerate(figures.values()))
    prompt = next((e for e in (*spec, *ar) if isinstance(e, Start)), None)
    done = [e for e in (*spec, *ar) if isinstance(e, Done)]
    summary = stats.compare_html(stats.run_stats(spec), stats.run_stats(ar), greedy=greedy)
    panes = "".join(
        f'<section><h2>{name}</h2>{tokens.tokens_html(events, placeholder="Not run.")}'
        f'{stats.stats_html(stats.run_stats(events))}</section>'
        for name, events in (("Speculative", spec), ("Autoregressive", ar)) if events)
    return (f'<!doctype html><html lang="en"><head><meta charset="utf-8"><title>{html.escape(title)}</title>'
            f'<style>{css}{_PAGE_CSS}</style></head><body class="mv-export">'
            f'<h1>{html.escape(title)}</h1>'
            f'<p class="mv-export-meta">{_describe(prompt, done)}</p>{summary}{tokens.legend_html()}'
            f'<div class="mv-export-panes">{panes}</div>{plots}</body></html>')


def _figure_html(fig, with_plotlyjs: bool) -> str:
    """One chart as a div; the charts are built unvalidated with template "none", which
    plotly's HTML writer wants as a (here empty) template object."""
    import plotly.io as pio
    d = fig.to_dict()
    d["layout"]["template"] = {}
    return pio.to_html(d, full_html=False, include_plotlyjs=with_plotlyjs, validate=False)


def _describe(start: Start | None, done: Sequence[Done] = ()) -> str:
    """The run's settings in one line: the prompt, the drafter, the decoding, what each
    model ran in, the engine, and the graphs compiled during the runs (off their clocks)."""
    if start is None:
        return "No run."
    s = start.settings
    parts = [f"prompt: {start.prompt_tokens} tokens"]
    if s.get("drafter"):
        parts.append(f"drafter: {s['drafter']}, schedule: {s.get('schedule', '')} "
                     f"(first draft length {s.get('draft_tokens', '')})")
    t = s.get("temperature") or 0
    parts.append("greedy" if not t else f"sampling at temperature {t:g}")
    if s.get("target_precision"):
        parts.append(f"target in {s['target_precision']}"
                     + (f", drafter in {s['drafter_precision']}" if s.get("drafter_precision") else ""))
    parts.append(start.ran.label)
    compiling = sum(e.compile_seconds for e in done)
    if compiling > 0:
        parts.append(f"compile {compiling:.1f} s, not in the timings")
    return html.escape(" · ".join(parts))


_PAGE_CSS = """
body.mv-export { font-family: system-ui, sans-serif; max-width: 1200px; margin: 24px auto; padding: 0 16px;
  color: #111827; }
.mv-export-panes { display: grid; grid-template-columns: 1fr 1fr; gap: 16px; margin-top: 12px; }
.mv-export-panes h2 { font-size: 1rem; margin: 0 0 6px; }
.mv-export-plot { margin-top: 16px; }
"""


class Downloads:
    """Files for download buttons, in one temporary folder that keeps only the newest
    ``keep`` (Gradio copies each into its own cache when it is sent)."""

    def __init__(self, keep: int = 64):
        self.keep = keep
        self._root: Path | None = None
        self._made: list[Path] = []
        self._lock = threading.Lock()

    def path(self, name: str) -> Path:
        """A fresh path ending in ``name`` (the name the visitor's browser saves)."""
        with self._lock:
            if self._root is None:
                self._root = Path(tempfile.mkdtemp(prefix="mtp-viz-downloads-"))
            folder = self._root / uuid.uuid4().hex
            folder.mkdir()
            self._made.append(folder)
            while len(self._made) > self.keep:
                shutil.rmtree(self._made.pop(0), ignore_errors=True)
            return folder / name


__all__ = ["steps_csv", "page_html", "Downloads", "CSV_COLUMNS"]
