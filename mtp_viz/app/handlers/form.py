"""The page's form and the ``/generate`` parameters, read into checked run settings.

Gradio sends numbers as floats and any JSON value through the API; these functions turn
them into a :class:`mtp_viz.sources.settings.RunSettings` and let its ``validate`` judge
the values, so the form, the API, the CLI and the Python API give the same sentence for
the same mistake.
"""
from __future__ import annotations

import math
from typing import Any

from mtp_viz.engine import engines
from mtp_viz.engine.decoding import Sampling
from mtp_viz.errors import UserError
from mtp_viz.sources.precision import Precision
from mtp_viz.sources.settings import MODES, RunSettings, quote


def _float(value: Any, name: str) -> float:
    """A number from a form field or a JSON value, or one sentence; true and false are
    refused (the API takes any JSON value, and Python counts True as 1)."""
    if isinstance(value, bool):
        raise UserError(f"{name} must be a number.")
    try:
        return float(value)
    except (TypeError, ValueError):
        raise UserError(f"{name} must be a number.") from None


def whole(value: Any, name: str) -> int:
    """A whole number from a form field (Gradio sends floats), or one sentence."""
    f = _float(value, name)
    if not math.isfinite(f) or f != int(f):
        raise UserError(f"{name} must be a whole number.")
    return int(f)


def number(value: Any, name: str) -> float:
    """A finite number from a form field, or one sentence."""
    f = _float(value, name)
    if not math.isfinite(f):
        raise UserError(f"{name} must be a finite number.")
    return f


def text(value: Any, name: str) -> str:
    """A text parameter (the API takes any JSON value), or one sentence naming it."""
    if not isinstance(value, str):
        raise UserError(f"{name} must be a text, not {quote(value)}.")
    return value


def flag(value: Any, name: str) -> bool:
    """A switch from the API: true or false only (``bool("no")`` would be true)."""
    if not isinstance(value, bool):
        raise UserError(f"{name} must be true or false, not {quote(value)}.")
    return value


def precision_of(target: Any = None, drafter: Any = None) -> Precision:
    """The page's precision fields (``default``: ``MTP_VIZ_DTYPE``, else the device's),
    checked: one sentence for anything else (the API takes any JSON value)."""
    return Precision.of(None, text(target or "default", "The target precision"),
                        text(drafter or "default", "The drafter precision"))


def engine_of(value: Any = None) -> str:
    """The page's ``#engine`` choice, a name of :data:`mtp_viz.engine.engines.ENGINES`
    (None, not given: the default), checked: one sentence for anything else (the API
    takes any JSON value)."""
    if value is None:
        return engines.default_engine()
    return engines.check_engine(text(value, "The engine"))


NO_ENGINE = "none"   # Measure's #measure-beside: no other engine beside the pair


def beside_of(value: Any = None) -> str | None:
    """Measure's ``#measure-beside`` choice: the engine whose plain decoding it times beside the pair (a name
    of :data:`mtp_viz.engine.engines.ENGINES`), or None for :data:`NO_ENGINE` (or not given), checked."""
    if value is None or value == NO_ENGINE:
        return None
    return engines.check_engine(text(value, "The engine measured beside"))


def check_prompt(prompt: Any, cap_tokens: int) -> str:
    """The prompt text, or one sentence; a cheap length bound before any tokenizing (no
    tokenizer makes more tokens than characters plus a few specials)."""
    if not isinstance(prompt, str) or not prompt.strip():
        raise UserError("Type a prompt first, or pick one of the examples.")
    if len(prompt) > 16 * cap_tokens:
        raise UserError(f"The prompt is too long for this app (at most {cap_tokens} tokens).")
    return prompt


def form_settings(v: dict[str, Any], cap: int, prompt_cap: int) -> RunSettings:
    """The page's form values (see :mod:`mtp_viz.app.page.wiring`) as checked settings.
    Under greedy decoding the sampling fields are hidden on the page, so their values
    are not read."""
    greedy = v["decoding"] == "greedy"
    seed = None if greedy or v["seed"] in (None, "") else whole(v["seed"], "The seed")
    sampling = Sampling() if greedy else Sampling(number(v["temperature"], "Temperature"),
                                                  whole(v["top_k"], "Top-k"), number(v["top_p"], "Top-p"), seed)
    return RunSettings(
        prompt=check_prompt(v["prompt"], prompt_cap),
        modes=MODES if flag(v["baseline"], "Baseline") else ("speculative",), drafter=v["drafter_kind"],
        max_new_tokens=whole(v["max_new_tokens"], "Max new tokens"),
        draft_tokens=whole(v["draft_tokens"], "Draft tokens"), schedule=v["schedule"], sampling=sampling,
        chat=flag(v["chat"], "Chat"), experts=flag(v.get("experts", False), "Count experts"),
        max_prompt_tokens=prompt_cap).validate(cap)


def api_settings(prompt: Any, mode: Any, drafter: Any, max_new_tokens: Any, draft_tokens: Any,
                 schedule: Any, temperature: Any, top_p: Any, top_k: Any, seed: Any, chat: Any,
                 cap: int, prompt_cap: int) -> RunSettings:
    """``/generate``'s parameters as checked settings: every value is checked whatever
    the decoding mode (a top-p of 2 is refused under greedy decoding too)."""
    seed = None if seed in (None, "") else whole(seed, "The seed")
    return RunSettings(
        prompt=check_prompt(text(prompt, "The prompt"), prompt_cap), modes=(text(mode, "The mode"),),
        drafter=text(drafter, "The drafter"), max_new_tokens=whole(max_new_tokens, "Max new tokens"),
        draft_tokens=whole(draft_tokens, "Draft tokens"), schedule=text(schedule, "The schedule"),
        sampling=Sampling(number(temperature, "Temperature"), whole(top_k, "Top-k"), number(top_p, "Top-p"), seed),
        chat=flag(chat, "Chat"), max_prompt_tokens=prompt_cap).validate(cap)


__all__ = ["NO_ENGINE", "api_settings", "beside_of", "check_prompt", "engine_of", "flag", "form_settings", "number",
           "precision_of", "text", "whole"]
