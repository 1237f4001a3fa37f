"""Frames as the page's outputs: the one adapter between a view's
:class:`~mtp_viz.views.frame.Frame` and Gradio's outputs list, and the frame that only
says something in #status. Every handler returns its frames through :func:`outputs`."""
from __future__ import annotations

from typing import Any

import gradio as gr

from mtp_viz.views import tokens
from mtp_viz.views.frame import Frame


def outputs(f: Frame, sess: Any = None, replay: Any = None) -> list[Any]:
    """A frame as the run outputs list (:meth:`Frame.parts`, the adapter beside the frame,
    then the session and Race replay's button): Gradio's skip for what it leaves None, so
    the page keeps it."""
    return [gr.skip() if v is None else v for v in (*f.parts(), sess, replay)]


def message(text: str, level: str = "info") -> Frame:
    """A frame that only says ``text`` in #status."""
    return Frame(status=tokens.message_html(text, level=level))


__all__ = ["message", "outputs"]
