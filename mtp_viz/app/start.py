"""``mtp_viz.launch(pair)``: the whole app on a pair already in memory (the public API
names this function; a notebook calls it, and no other front end imports it)."""
from __future__ import annotations

from typing import Any


def launch(pair: Any, **kwargs: Any):
    """The whole app on ``pair`` (from :func:`mtp_viz.from_models` or
    :func:`mtp_viz.load_pair`), with no second load: inline in a notebook, else on a
    local port (``port=``; else Gradio's default). torch's CPU threads are set as the app
    sets them (``MTP_VIZ_THREADS``; by default one core less than the machine has), for the
    process, so its runs are timed as the app's, Measure's and the bench's are. The pair is
    warmed first (a short untimed run through the app's path, so its first run is timed
    warm), and the page opens on it ready, by its models' names. Returns the Gradio app; ``demo.close()``
    stops it, runs in progress first. Other ``kwargs`` go to Gradio's ``launch`` (``height=``...)."""
    from mtp_viz.sources import models
    from mtp_viz.views.notebook import in_notebook

    from .page import layout
    from .runtime import loading, service
    models.set_threads(service.threads())   # the app's threads: one way to time, on every surface
    demo = layout.build_demo(pair=loading.warm(pair))  # warmed: the page opens on it ready, its first run timed warm
    layout.launch(demo, host=kwargs.pop("host", None), port=kwargs.pop("port", None),
                  **{"inline": in_notebook(), "prevent_thread_lock": True, "quiet": True, **kwargs})
    return demo


__all__ = ["launch"]
