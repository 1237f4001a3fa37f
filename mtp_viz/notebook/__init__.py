"""mtp-viz in a notebook (Jupyter, Colab, VS Code): a run drawn inline while it
happens, and the whole app over a pair already in memory.

    pair = mtp_viz.from_models(target_model, assistant_model, processor)
    events = mtp_viz.show(pair, "Why is the sky blue?", max_new_tokens=64)  # tokens, stats, charts
    m = mtp_viz.notebook.show_measurement(pair, "Why is the sky blue?")   # faster? the app's Measure
    mtp_viz.show(rec)                                                # a recorded generate call
    demo = mtp_viz.launch(pair)                                      # the app, inline
    mtp_viz.notebook.embed_plotlyjs()   # once, first: charts that draw offline in any page
    mtp_viz.notebook.quiet_known_noise()   # once, first: drop torchao's two notices on every load

Outside a notebook :func:`show` prints the terminal view (the one ``mtp-viz generate``
prints) instead. A front end like the CLI: it consumes a source's events, draws with
:mod:`mtp_viz.views`, and imports IPython only when it draws; nothing below it imports
it. ``mtp_viz.launch`` is the app's (:func:`mtp_viz.app.start.launch`): a front end never
imports another.
"""
from __future__ import annotations

import sys
import time
from collections.abc import Iterable
from typing import Any

from mtp_viz.engine.events import Event
from mtp_viz.errors import UserError, clip
from mtp_viz.sources.noise import quiet_known_noise
from mtp_viz.views.notebook import in_notebook

__all__ = ["embed_plotlyjs", "in_notebook", "quiet_known_noise", "show", "show_anatomy", "show_events",
           "show_measurement", "show_side_by_side"]

FRAME_SECONDS = 0.25   # the inline view is redrawn at most this often while a run streams


def show(what: Any, /, prompt: str | list | None = None, *, charts: bool = True, out=None,
         baseline: bool = True, **settings: Any) -> list[Event]:
    """Draw a run as it happens and return its events (:func:`show_events`: inline in a
    notebook, the app's token spans, the stats line, then its charts; elsewhere the
    terminal view on ``out``). ``what`` is one of:

    - a :class:`~mtp_viz.sources.pair.ModelPair` and a ``prompt``: the pair's
      ``generate(prompt, **settings)``, which takes every setting ``generate`` takes. A
      speculative run has its plain baseline beside it (``baseline=False``: not), the two
      taking turns and timed as the app's Run times them (after the same untimed warm-up,
      with torch's threads set as the app sets them for the run:
      :func:`mtp_viz.sources.models.pinned_threads`); the speedup is drawn under the run,
      worded as the app words it;
    - a recording from :func:`mtp_viz.record`: its latest recorded call;
    - events: a list, or any iterable of them (a run still streaming is drawn as it comes).
    """
    from mtp_viz.sources.hf_generate import Recording
    from mtp_viz.sources.pair import ModelPair
    if isinstance(what, ModelPair):
        if prompt is None:
            raise UserError("mtp_viz.show(pair, prompt) runs the pair on a prompt: give it one.")
        return _show_pair(what, prompt, settings, baseline, charts, out)
    if prompt is not None or settings:
        given = ", ".join((["prompt"] if prompt is not None else []) + sorted(settings))
        raise UserError(f"mtp_viz.show takes a prompt and generate's settings with a model pair only; "
                        f"a {type(what).__name__} is drawn as it is (given: {clip(given)}).")
    if isinstance(what, Recording):
        return show_events(what.source.recorded["speculative"], charts=charts, out=out)
    if isinstance(what, (str, bytes)) or not isinstance(what, Iterable):
        raise UserError(f"mtp_viz.show draws a model pair's run, a recording or events, not "
                        f"{clip(type(what).__name__)}.")
    return show_events(what, charts=charts, out=out)


def _show_pair(pair: Any, prompt: str | list, settings: dict, baseline: bool, charts: bool, out) -> list[Event]:
    """A pair's run drawn, with its plain baseline in turns where it has one."""
    from mtp_viz.sources.models import pinned_threads
    with pinned_threads():
        if not baseline or settings.get("mode", "speculative") != "speculative":
            return show_events(pair.generate(prompt, **settings), charts=charts, out=out)
        settings.pop("mode", None)
        from mtp_viz.sources.base import WARM_UP_TOKENS
        for _ in pair.compare(prompt, **{**settings, "max_new_tokens": WARM_UP_TOKENS}):  # untimed, as Measure's
            pass
        plain: list[Event] = []

        def speculative():
            for mode, e in pair.compare(prompt, **settings):
                if mode == "speculative":
                    yield e
                else:
                    plain.append(e)   # drawn as the speedup once both are done
        return show_events(speculative(), charts=charts, out=out, baseline=plain)


def show_events(events: Iterable[Event], *, charts: bool = True, out=None,
                baseline: list[Event] | None = None) -> list[Event]:
    """Draw ``events`` as they arrive and return them all: in a notebook, the app's
    token spans and stats line in one output that is redrawn while the run streams,
    then its charts; elsewhere, the terminal view on ``out`` (default stdout).
    ``baseline``: the plain run that took turns with it (filled while ``events`` run),
    drawn as the speedup under the run."""
    seen: list[Event] = []

    def kept(stream):
        for e in stream:
            seen.append(e)
            yield e

    if not in_notebook():
        from mtp_viz.analysis.terminal import print_styled
        out = out or sys.stdout
        print_styled(kept(events), color=getattr(out, "isatty", lambda: False)(), out=out)
        if baseline:
            from mtp_viz.views.stats import compare_text, run_stats
            print(compare_text(run_stats(seen), run_stats(baseline)), file=out)
        return seen
    from IPython.display import HTML, display

    from mtp_viz.views.notebook import cell_html
    css = _css()
    handle, drawn = display(HTML(cell_html([], css=css)), display_id=True), 0.0
    for _ in kept(events):
        if time.monotonic() - drawn >= FRAME_SECONDS:  # throttled: drawing never slows the run much
            handle.update(HTML(cell_html(seen, css=css)))
            drawn = time.monotonic()
    handle.update(HTML(cell_html(seen, css=css, baseline=baseline)))
    if charts:
        _show_charts(seen)
    return seen


def _css() -> str:
    from mtp_viz.views.export import stylesheet
    return stylesheet()


def show_anatomy(pair: Any, events: Iterable[Event] = ()) -> None:
    """The app's anatomy panel of ``pair`` (what the drafter reads from the target, and
    where ``events``' rejections fell), inline; a notebook only."""
    from IPython.display import HTML, display

    from mtp_viz.analysis.anatomy import anatomy
    from mtp_viz.views.anatomy import anatomy_html
    display(HTML(f'<div class="mv-notebook"><style>{_css()}</style>{anatomy_html(anatomy(pair), list(events))}</div>'))


def show_side_by_side(runs: dict[str, Iterable[Event]]) -> None:
    """Finished runs of one prompt next to each other, by name (``{"transformers generate":
    rec.events, "mtp-viz engine": events}``): their tokens and stats lines; a notebook only."""
    from IPython.display import HTML, display

    from mtp_viz.views.notebook import side_by_side_html
    display(HTML(side_by_side_html({name: list(events) for name, events in runs.items()}, css=_css())))


def _show_charts(events: list[Event]) -> None:
    """The app's charts of one run. Each output carries plotly's own MIME type (JupyterLab,
    Notebook 7, VS Code draw it with their own plotly.js, offline) and a small HTML
    fallback (classic Notebook, nbconvert's page, Colab) that draws with the page's one
    copy of plotly.js: :func:`embed_plotlyjs`'s, else plotly's CDN, loaded once per page
    (:func:`mtp_viz.views.notebook.chart_html`). Never plotly.js itself: a notebook of many
    runs stays small."""
    import uuid

    from IPython.display import display

    from mtp_viz.engine.events import Start
    from mtp_viz.views import charts
    from mtp_viz.views.notebook import chart_html
    spec = any(isinstance(e, Start) and e.mode == "speculative" for e in events)
    runs = (events, ()) if spec else ((), events)  # the charts take (speculative, autoregressive)
    for chart in charts.CHARTS:
        fig = chart.figure(*runs).to_dict()
        fig["layout"]["template"] = {}  # built unvalidated with template "none" (see views.export)
        display({"application/vnd.plotly.v1+json": fig,
                 "text/html": chart_html(fig, f"mv-{chart.id}-{uuid.uuid4().hex[:12]}")}, raw=True)


def embed_plotlyjs() -> None:
    """Put the installed plotly's plotly.js (4.8 MB) into the notebook, once, so that the
    charts of every later :func:`show` draw on pages with no network and no plotly of
    their own: classic Notebook offline, nbconvert's HTML page opened offline. JupyterLab,
    Notebook 7 and VS Code need none of it (they draw plotly's MIME type themselves), and
    pages online load it from plotly's CDN once; call it in one cell near the top."""
    from IPython.display import HTML, display

    from mtp_viz.views.notebook import plotlyjs_html
    display(HTML(plotlyjs_html()))


def show_measurement(pair: Any, prompt: str | list, *, repeats: int = 5, out=None, **settings: Any):
    """Is speculation faster on this prompt? Both modes, ``repeats`` times, alternating,
    off-screen: the app's Measure, through the bench's own runner and reduction
    (:func:`mtp_viz.measure.compare.measure`), greedy. ``settings``: ``max_new_tokens``,
    ``draft_tokens``, ``schedule``, ``drafter``, ``chat`` (as :class:`RunSettings` takes
    them). Draws the verdict (the app's badge in a notebook, one line elsewhere) and
    returns the :class:`~mtp_viz.measure.compare.Measurement`."""
    from mtp_viz.measure.compare import measure
    from mtp_viz.sources.settings import RunSettings
    if not isinstance(repeats, int) or not 2 <= repeats <= 100:
        raise UserError("show_measurement takes between 2 and 100 repeats.")
    from mtp_viz.sources.models import pinned_threads
    with pinned_threads():
        m = measure(pair, RunSettings(prompt, **settings).validate(), repeats)
    if in_notebook():
        from IPython.display import HTML, display

        from mtp_viz.views.stats import measurement_html
        display(HTML(f'<div class="mv-notebook"><style>{_css()}</style>'
                     f'{measurement_html(m, engine=pair.decoder.ran)}</div>'))
    else:
        from mtp_viz.views.stats import measurement_sentence
        print(f"{measurement_sentence(m, pair.decoder.ran.label)} ({m.spec_tps:.1f} vs {m.ar_tps:.1f} tokens/s)",
              file=out or sys.stdout)
    return m
