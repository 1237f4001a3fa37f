"""Gradio's controls, with refusals that name the field instead of echoing the value.

Gradio's own ``Dropdown`` refuses an off-list value (a forged call: the API takes any
JSON) with a sentence that repeats the whole value and every choice: 100,000 characters
sent came back as 100,000 characters. :func:`Dropdown` is ``gr.Dropdown`` whose refusal
names the field and nothing else. (A function, not a subclass: Gradio writes a ``.pyi``
stub beside the module of every component class it sees defined.)
"""
from __future__ import annotations

from typing import Any

import gradio as gr


def Dropdown(*args: Any, **kwargs: Any) -> gr.Dropdown:  # noqa: N802 - stands where gr.Dropdown stood
    box = gr.Dropdown(*args, **kwargs)
    check = box.preprocess

    def preprocess(payload):
        try:
            return check(payload)
        except gr.Error:
            raise gr.Error(f"{box.label or 'That field'}: that value is not one of its choices.",
                           print_exception=False) from None

    box.preprocess = preprocess   # this instance's; the browser and the API see a plain dropdown
    return box


__all__ = ["Dropdown"]
