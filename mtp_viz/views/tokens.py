"""Pure view functions: events in, HTML strings or plotly figures out.

No gradio, no torch. Every piece of model text goes through :func:`escape_token`
before it reaches the page, so a model that writes ``<img onerror=...>`` shows that
text instead of running it. Token kinds come from events, never from searching text.

Stable hooks: every displayed token is ``<span class="tok" data-kind=KIND>`` with KIND
in drafted | accepted | rejected | bonus | token; a bonus also has
``data-bonus="correction"`` (it replaced a rejected draft) or ``"extension"`` (every
draft was accepted and the target added one more).
"""
from __future__ import annotations

import html
import re
from typing import Iterable, Sequence

from mtp_viz.engine.events import Accepted, Bonus, Drafted, Event, Rejected, Step, Token

_SPECIAL = re.compile(r"^<[^<>\s]{1,40}>$|^\[[A-Z_]{2,20}\]$")

KIND_HELP = {
    "accepted": "draft accepted by the target",
    "correction": "target's own token, replacing a rejected draft",
    "extension": "target's bonus token after every draft was accepted",
    "rejected": "draft rejected by the target",
    "drafted": "draft waiting for verification",
    "token": "one target forward, one token",
}


def escape_token(text: str, token_id: int | None = None, breaks: bool = True) -> tuple[str, bool]:
    """HTML for one token's text, and whether it is a special token.

    Newlines get a visible ``↵`` and keep their line break (panes use ``white-space:
    pre-wrap``) when ``breaks``; drafts that are not (or not yet) in the text do not
    break lines. An empty piece shows its id so no token is ever invisible."""
    if text == "":
        return (f"⟨{token_id}⟩" if token_id is not None else "⟨⟩"), True
    special = bool(_SPECIAL.match(text))
    out = html.escape(text, quote=True)
    if "\n" in out:
        out = out.replace("\n", '<span class="nl">↵</span>' + ("\n" if breaks else ""))
    return out, special


def token_span(kind: str, text: str, token_id: int | None = None, *, bonus: str = "",
               title: str = "", step: int | None = None, index: int | None = None) -> str:
    """One ``<span class="tok" data-kind=...>`` for a token; ``data-step``/``data-index``
    name its event, for the token inspector."""
    body, special = escape_token(text, token_id, breaks=kind not in ("rejected", "drafted"))
    cls = "tok special" if special else "tok"
    extra = f' data-bonus="{bonus}"' if bonus else ""
    extra += f' data-step="{step}"' if step is not None else ""
    extra += f' data-index="{index}"' if index is not None else ""
    tip = f' title="{html.escape(title, quote=True)}"' if title else ""
    return f'<span class="{cls}" data-kind="{kind}"{extra}{tip}>{body}</span>'


def _prob(name: str, v: float) -> str:
    return f"{name}={v:.2f}"


def step_html(events: Sequence[Event]) -> str:
    """HTML for the token events of one step, in stream order.

    While a step is being verified only its ``drafted`` events exist: they show as
    pending drafts. Once verification arrives, drafts become accepted (kept),
    rejected (struck through where the target disagreed) and the target's bonus."""
    verified = any(isinstance(e, (Accepted, Rejected, Bonus, Step)) for e in events)
    parts = []
    for e in events:
        if isinstance(e, Drafted):
            if not verified:
                parts.append(token_span("drafted", e.text, e.token_id,
                                        title=f"step {e.step} · draft {e.index + 1} · pending · {_prob('q', e.q)}"))
        elif isinstance(e, Accepted):
            parts.append(token_span("accepted", e.text, e.token_id, step=e.step, index=e.index,
                                    title=f"step {e.step} · draft {e.index + 1} accepted · "
                                          f"{_prob('p', e.p)} {_prob('q', e.q)}"))
        elif isinstance(e, Rejected):
            parts.append(token_span("rejected", e.text, e.token_id, step=e.step, index=e.index,
                                    title=f"step {e.step} · draft {e.index + 1} rejected · "
                                          f"{_prob('p', e.p)} {_prob('q', e.q)}"))
        elif isinstance(e, Bonus):
            kind = "correction" if e.kind == "correction" else "extension"
            parts.append(token_span("bonus", e.text, e.token_id, bonus=kind, step=e.step, index=e.index,
                                    title=f"step {e.step} · {KIND_HELP[kind]} · {_prob('p', e.p)}"))
        elif isinstance(e, Token):
            parts.append(token_span("token", e.text, e.token_id, step=e.step,
                                    title=f"forward {e.step} · {_prob('p', e.p)}"))
        elif isinstance(e, Step):
            parts.append(rejected_count_html(e, sum(isinstance(x, Rejected) for x in events)))
    return "".join(parts)


def unreported_rejections(step: Step, shown: int) -> int:
    """Rejected drafts of a step whose tokens the source did not report (a vLLM server
    says how many, not which); ``shown`` is the step's ``rejected`` events. The target
    agreed with ``max(agreed, accepted)`` drafts (``agreed`` is 0 where unknown): the
    rest were rejected. 0 for the local engine, which reports every rejected draft."""
    return max(0, step.draft_tokens - max(step.agreed, step.accepted) - shown)


def rejected_count_html(step: Step, shown: int) -> str:
    """``<span class="mv-rejcount" data-rejected=N>✗N</span>`` for a step's
    :func:`unreported_rejections`; "" when every rejected draft is shown as a token."""
    n = unreported_rejections(step, shown)
    if n <= 0:
        return ""
    return (f'<span class="mv-rejcount" data-step="{step.step}" data-drafted="{step.draft_tokens}" '
            f'data-rejected="{n}" title="step {step.step}: {step.draft_tokens} drafted, {n} rejected; '
            f'the server reports how many drafts it rejected, not which tokens">✗{n}</span>')


def group_steps(events: Iterable[Event]) -> list[list[Event]]:
    """Token and step events grouped by step number, in stream order."""
    groups: list[list[Event]] = []
    current = None
    for e in events:
        step = getattr(e, "step", None)
        if step is None:
            continue
        if step != current:
            groups.append([])
            current = step
        groups[-1].append(e)
    return groups


def placeholder_html(message: str) -> str:
    return f'<div class="mv-text mv-empty">{html.escape(message)}</div>'


def tokens_html(events: Sequence[Event], *, placeholder: str = "Tokens appear here.") -> str:
    """The whole pane: every step's tokens, pending drafts of an open step last."""
    body = "".join(step_html(g) for g in group_steps(events))
    if not body:
        return placeholder_html(placeholder)
    return f'<div class="mv-text">{body}</div>'


class PaneRenderer:
    """Incremental form of :func:`tokens_html` for streaming: a closed step's HTML is
    computed once, so each update costs one step, not the whole text."""

    def __init__(self, placeholder: str = "Tokens appear here."):
        self.placeholder = placeholder
        self._closed: list[str] = []
        self._open: list[Event] = []

    def add(self, e: Event) -> None:
        if getattr(e, "step", None) is None:
            return
        if self._open and self._open[0].step != e.step:  # type: ignore[attr-defined]
            self._closed.append(step_html(self._open))
            self._open = []
        self._open.append(e)
        if isinstance(e, Step):
            self._closed.append(step_html(self._open))
            self._open = []

    def html(self) -> str:
        body = "".join(self._closed) + step_html(self._open)
        return f'<div class="mv-text">{body}</div>' if body else placeholder_html(self.placeholder)


def legend_html() -> str:
    """The legend, drawn with the same spans as the panes."""
    samples = [
        (token_span("accepted", "accepted"), KIND_HELP["accepted"]),
        (token_span("bonus", "correction", bonus="correction"), KIND_HELP["correction"]),
        (token_span("bonus", "bonus", bonus="extension"), KIND_HELP["extension"]),
        (token_span("rejected", "rejected"), KIND_HELP["rejected"]),
        (token_span("drafted", "pending"), KIND_HELP["drafted"]),
        (token_span("token", "token"), "autoregressive: " + KIND_HELP["token"]),
    ]
    items = "".join(f'<span class="mv-legend-item">{s}<small>{html.escape(t)}</small></span>'
                    for s, t in samples)
    return f'<div class="mv-legend">{items}</div>'


def message_html(message: str, *, level: str = "info") -> str:
    """One visible sentence (info, warn or error) for the status line."""
    if not message:
        return ""
    return f'<div class="mv-msg mv-msg-{level}">{html.escape(message)}</div>'
