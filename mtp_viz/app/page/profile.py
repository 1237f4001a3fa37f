"""The Measure tab's cost profile section: what every forward of the picked pair costs on
this machine and the speedup that predicts (handled by :mod:`mtp_viz.app.handlers.profile`)."""
from __future__ import annotations

from typing import Any

import gradio as gr

from mtp_viz.views import tokens


def section(h) -> dict[str, Any]:
    """The Measure tab's cost profile (:mod:`mtp_viz.app.handlers.profile`): its button,
    Stop, status line, result and chart, as the page's fields of those names."""
    gr.Markdown("### Cost profile: does MTP pay off for this pair on this machine?", elem_id="profile-title")
    with gr.Row(elem_id="profile-buttons"):
        run = gr.Button("Profile", variant="primary", elem_id="profile-run", scale=0, min_width=90, size="sm")
        stop = gr.Button("Stop", elem_id="profile-stop", scale=0, min_width=70, size="sm")
        status = gr.HTML(tokens.message_html(PROFILE_WAITING), elem_id="profile-status", padding=False)
    result, figure = h.profiling.empty()
    return dict(profile_btn=run, profile_stop=stop, profile_status=status,
                profile_result=gr.HTML(result, elem_id="profile-result", padding=False),
                profile_plot=gr.Plot(figure, elem_id="profile-plot", show_label=False))


PROFILE_WAITING = ("Profile times the picked pair's forwards on this machine: the plain step, a verification at "
                   "every width, one draft, the prefill; then predicts the speedup at every acceptance and draft "
                   "length, and checks it with whole runs at a set acceptance (every forward real). It takes the "
                   "engine's turn like a run: tens of seconds on the bundled pair.")


__all__ = ["PROFILE_WAITING", "section"]
