"""Deep links: the URL query that restores the prompt, the model pair and the settings.

A teacher hands the room one link, e.g.
``?prompt=def%20f(x)%3A&model=tiny&draft_tokens=6&max_new_tokens=32&decoding=greedy``,
plus ``&tab=measure`` to open a tab other than the first.
The parameter names are a contract (README, "Links and presenter mode"). Pure: query
parameters in, form values and problems out; no gradio here.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping
from urllib.parse import urlencode

from mtp_viz.engine.drafters import DRAFTERS
from mtp_viz.engine.engines import ENGINES, default_engine, resolve
from mtp_viz.engine.schedules import SCHEDULES
from mtp_viz.sources.precision import PRECISIONS
from mtp_viz.sources.settings import MAX_DRAFT_TOKENS

# Parameters that belong to the page itself, not to the form: presenter mode (read by
# the page's script, which knows only "1"), the tab it opens on (read by the tabs' script,
# which knows only the page's tab ids) and Gradio's own (``view=api``, ``__theme=dark``).
PAGE_PARAMS = ("presenter", "tab", "view")
PRESENTER = ("1",)
DECODINGS = ("greedy", "sampling")
SAMPLING_ONLY = ("temperature", "top_p", "top_k", "seed")


@dataclass(frozen=True)
class Limits:
    """What the page's controls accept."""
    models: tuple[str, ...]          # preset keys of the model picker
    max_new_tokens: int              # the deployment's cap
    prompt_chars: int                # a cheap bound on the prompt (see form.check_prompt)
    draft_tokens: int = MAX_DRAFT_TOKENS
    tabs: tuple[str, ...] = ()       # the page's tab ids, for ?tab= (first: the one it opens on)


@dataclass
class Link:
    """The form values a link sets (by form name) and one phrase per ignored parameter."""
    values: dict[str, Any] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)

    def sentence(self) -> str:
        """All problems as one sentence for ``#status`` ("" when none)."""
        return f"Ignored from the link: {'; '.join(self.problems)}." if self.problems else ""


def _whole(lo: int, hi: int | None = None) -> Callable[[str], int | None]:
    def check(text: str) -> int | None:
        try:
            f = float(text)
        except ValueError:
            return None
        if not math.isfinite(f) or f != int(f) or f < lo or (hi is not None and f > hi):
            return None
        return int(f)
    return check


def _real(lo: float, hi: float) -> Callable[[str], float | None]:
    def check(text: str) -> float | None:
        try:
            f = float(text)
        except ValueError:
            return None
        return f if math.isfinite(f) and lo <= f <= hi else None
    return check


def _one_of(options: tuple[str, ...]) -> Callable[[str], str | None]:
    return lambda text: text.strip().lower() if text.strip().lower() in options else None


SWITCH = {"1": True, "true": True, "0": False, "false": False}


def _switch(text: str) -> bool | None:
    return SWITCH.get(text.strip().lower())


def rules(limits: Limits) -> dict[str, tuple[str, Callable[[str], Any], str]]:
    """Query name -> (form name, parser returning None when invalid, what is expected)."""
    prompt_ok = lambda t: t if t.strip() and len(t) <= limits.prompt_chars else None  # noqa: E731
    return {
        "prompt": ("prompt", prompt_ok, f"a non-empty text of at most {limits.prompt_chars} characters"),
        "model": ("model", _one_of(limits.models), "one of " + ", ".join(limits.models)),
        "draft_tokens": ("draft_tokens", _whole(1, limits.draft_tokens),
                         f"a whole number from 1 to {limits.draft_tokens}"),
        "max_new_tokens": ("max_new_tokens", _whole(1, limits.max_new_tokens),
                           f"a whole number from 1 to {limits.max_new_tokens}"),
        "decoding": ("decoding", _one_of(DECODINGS), "greedy or sampling"),
        "temperature": ("temperature", _real(0.05, 2.0), "a number from 0.05 to 2"),
        "top_p": ("top_p", _real(0.05, 1.0), "a number from 0.05 to 1"),
        "top_k": ("top_k", _whole(0), "a whole number, 0 or more"),
        "seed": ("seed", _whole(0), "a whole number, 0 or more"),
        "schedule": ("schedule", _one_of(tuple(SCHEDULES)), "one of " + ", ".join(SCHEDULES)),
        "drafter": ("drafter_kind", _one_of(tuple(DRAFTERS)), "one of " + ", ".join(DRAFTERS)),
        **{name: (name, _one_of(PRECISIONS), "one of " + ", ".join(PRECISIONS))  # "default" is left out
           for name in ("target_precision", "drafter_precision")},
        # the engine, part of which pair loads: a name of the table, or the switch it replaced
        "engine": ("engine", _one_of(tuple(ENGINES)), "one of " + ", ".join(ENGINES)),
        "compile": ("engine", _compile, "1 or 0"),
    }


def _compile(text: str) -> str | None:
    """``compile=1`` / ``compile=0``, the switch ``engine=`` replaced: the compiled engine, or the default."""
    on = _switch(text)
    return None if on is None else resolve(None, on)


def _name(text: str) -> str:
    return text if len(text) <= 24 else text[:23] + "…"


def parse(params: Mapping[str, str], limits: Limits) -> Link:
    """The form values a URL query sets; every parameter checked, a bad one ignored
    with a phrase saying what it should be. Never raises."""
    link = Link()
    table = rules(limits)
    for key, raw in params.items():
        if key == "presenter" and raw not in PRESENTER:  # the script ignores it: say so
            link.problems.append("presenter (must be 1)")
        if key == "tab" and raw not in limits.tabs:  # the script opens the first tab instead: say so
            link.problems.append(f"tab (must be one of {', '.join(limits.tabs)})")
        if key in PAGE_PARAMS or key.startswith("__"):
            continue
        if key not in table:
            link.problems.append(f"{_name(key)} (not a setting)")
            continue
        form_name, check, expected = table[key]
        value = check(raw if isinstance(raw, str) else "")
        if value is None:
            link.problems.append(f"{key} (must be {expected})")
        else:
            link.values[form_name] = value
    return link


def query(values: Mapping[str, Any], limits: Limits) -> str:
    """The query string (with its leading ``?``) for the form's current values; a value
    the page would not accept back is left out, and so are the sampling settings of a
    greedy run (they do nothing there)."""
    out = {}
    greedy = values.get("decoding") == "greedy"
    for key, (form_name, check, _) in rules(limits).items():
        if greedy and key in SAMPLING_ONLY:
            continue
        v = values.get(form_name)
        if v is None or v == "" or v is False or (key == "engine" and v == default_engine()):  # the page's default
            continue
        if v is True:
            v = "1"
        text = f"{v:g}" if isinstance(v, float) else str(v)
        if check(text) is not None:
            out[key] = text
    return "?" + urlencode(out)
