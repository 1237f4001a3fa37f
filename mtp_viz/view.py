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
from dataclasses import dataclass, field
from typing import Iterable, Sequence

from .events import Accepted, Bonus, Done, Drafted, Error, Event, Rejected, Start, Step, Token

_SPECIAL = re.compile(r"^<[^<>\s]{1,40}>$|^\[[A-Z_]{2,20}\]$")

KIND_HELP = {
    "accepted": "draft accepted by the target",
    "correction": "target's own token, replacing a rejected draft",
    "extension": "target's bonus token after every draft was accepted",
    "rejected": "draft rejected by the target",
    "drafted": "draft waiting for verification",
    "token": "one target forward, one token",
}


def escape_token(text: str, token_id: int | None = None) -> tuple[str, bool]:
    """HTML for one token's text, and whether it is a special token.

    Newlines keep their line break (panes use ``white-space: pre-wrap``) and get a
    visible ``↵``; an empty piece shows its id so no token is ever invisible."""
    if text == "":
        return (f"⟨{token_id}⟩" if token_id is not None else "⟨⟩"), True
    special = bool(_SPECIAL.match(text))
    out = html.escape(text, quote=True)
    if "\n" in out:
        out = out.replace("\n", '<span class="nl">↵</span>\n')
    return out, special


def token_span(kind: str, text: str, token_id: int | None = None, *, bonus: str = "",
               title: str = "") -> str:
    """One ``<span class="tok" data-kind=...>`` for a token."""
    body, special = escape_token(text, token_id)
    cls = "tok special" if special else "tok"
    extra = f' data-bonus="{bonus}"' if bonus else ""
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
            parts.append(token_span("accepted", e.text, e.token_id,
                                    title=f"step {e.step} · draft {e.index + 1} accepted · {_prob('p', e.p)} {_prob('q', e.q)}"))
        elif isinstance(e, Rejected):
            parts.append(token_span("rejected", e.text, e.token_id,
                                    title=f"step {e.step} · draft {e.index + 1} rejected · {_prob('p', e.p)} {_prob('q', e.q)}"))
        elif isinstance(e, Bonus):
            kind = "correction" if e.kind == "correction" else "extension"
            parts.append(token_span("bonus", e.text, e.token_id, bonus=kind,
                                    title=f"step {e.step} · {KIND_HELP[kind]} · {_prob('p', e.p)}"))
        elif isinstance(e, Token):
            parts.append(token_span("token", e.text, e.token_id,
                                    title=f"forward {e.step} · {_prob('p', e.p)}"))
    return "".join(parts)


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


# ---------------------------------------------------------------- statistics


@dataclass
class RunStats:
    mode: str = ""
    tokens: int = 0                # generated tokens (accepted + bonus, or token)
    forwards: int = 0              # target forwards (one per step)
    drafted: int = 0
    accepted: int = 0
    seconds: float = 0.0           # elapsed, from the last step's timestamp or Done
    done: bool = False
    stop_reason: str = ""
    error: str = ""
    ids: list[int] = field(default_factory=list)
    texts: list[str] = field(default_factory=list)

    @property
    def tokens_per_second(self) -> float:
        return self.tokens / self.seconds if self.seconds > 0 else 0.0

    @property
    def tokens_per_forward(self) -> float:
        return self.tokens / self.forwards if self.forwards else 0.0

    def add(self, e: Event) -> "RunStats":
        """Fold one more event in (streaming keeps one RunStats instead of recounting)."""
        if isinstance(e, Start):
            self.mode = e.mode
        elif isinstance(e, (Accepted, Bonus, Token)):
            self.tokens += 1
            self.ids.append(e.token_id)
            self.texts.append(e.text)
            if isinstance(e, Accepted):
                self.accepted += 1
            if isinstance(e, Token):
                self.seconds = max(self.seconds, e.t)
        elif isinstance(e, Step):
            self.forwards += 1
            self.drafted += e.draft_len
            self.seconds = max(self.seconds, e.t)
        elif isinstance(e, Done):
            self.done, self.stop_reason, self.seconds = True, e.stop_reason, e.seconds
        elif isinstance(e, Error):
            self.error = e.message
        return self


def run_stats(events: Iterable[Event], *, now: float | None = None) -> RunStats:
    """Counts and timings of one run; ``now`` (seconds since its start) overrides the
    elapsed time for a run still in progress (live or replayed)."""
    s = RunStats()
    for e in events:
        s.add(e)
    if now is not None and not s.done:
        s.seconds = now
    return s


def stats_html(stats: RunStats) -> str:
    """The line under a pane: tokens, target forwards, tokens/s, elapsed."""
    items = [(f"{stats.tokens}", "tokens"), (f"{stats.forwards}", "target forwards")]
    if stats.mode == "speculative":
        items.append((f"{stats.tokens_per_forward:.2f}", "tokens / forward"))
        if stats.drafted:
            items.append((f"{100 * stats.accepted / stats.drafted:.0f}%", "drafts accepted"))
    items += [(f"{stats.tokens_per_second:.1f}", "tokens/s"), (f"{stats.seconds:.2f} s", "elapsed")]
    cells = "".join(f'<span class="mv-stat"><b>{v}</b> {html.escape(k)}</span>' for v, k in items)
    state = ""
    if stats.error:
        state = '<span class="mv-stat mv-bad">error</span>'
    elif stats.done and stats.stop_reason == "stopped":
        state = '<span class="mv-stat mv-warn">stopped</span>'
    elif stats.done:
        state = '<span class="mv-stat mv-ok">done</span>'
    return f'<div class="mv-stats">{cells}{state}</div>'


def compare_html(spec: RunStats, ar: RunStats, *, greedy: bool) -> str:
    """Speedup and, under greedy decoding, whether both outputs are token-identical."""
    if not (spec.done and ar.done) or not spec.tokens or not ar.tokens:
        return ""
    parts = []
    if spec.tokens_per_second and ar.tokens_per_second:
        x = spec.tokens_per_second / ar.tokens_per_second
        cls = "mv-ok" if x >= 1.0 else "mv-warn"
        word = "faster" if x >= 1.0 else "slower"
        parts.append(f'<span class="mv-badge {cls}">speculative is <b>{x:.2f}×</b> {word} '
                     f'({spec.tokens_per_second:.1f} vs {ar.tokens_per_second:.1f} tokens/s)</span>')
    if greedy:
        parts.append(identity_badge(spec, ar))
    return f'<div class="mv-compare">{"".join(parts)}</div>'


def identity_badge(spec: RunStats, ar: RunStats) -> str:
    n = min(len(spec.ids), len(ar.ids))
    first = next((i for i in range(n) if spec.ids[i] != ar.ids[i]), None)
    if first is None and len(spec.ids) == len(ar.ids):
        return f'<span class="mv-badge mv-ok">✓ token-identical outputs ({n} tokens)</span>'
    if first is None:
        return (f'<span class="mv-badge mv-warn">identical for the first {n} tokens; '
                f'lengths differ ({len(spec.ids)} vs {len(ar.ids)})</span>')
    a, _ = escape_token(spec.texts[first], spec.ids[first])
    b, _ = escape_token(ar.texts[first], ar.ids[first])
    return (f'<span class="mv-badge mv-bad">✗ outputs first differ at token {first + 1}: '
            f'<code>{a}</code> vs <code>{b}</code> (numerical ties can flip a greedy choice)</span>')


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


# ---------------------------------------------------------------- race replay


def events_until(events: Sequence[Event], t: float) -> tuple[list[Event], bool]:
    """The prefix of a recorded run visible at ``t`` seconds after its start, and
    whether the run had finished by then. A speculative step shows at its ``Step.t``;
    an autoregressive token at its ``Token.t``."""
    shown: list[Event] = []
    pending: list[Event] = []
    for e in events:
        if isinstance(e, Start):
            shown.append(e)
        elif isinstance(e, Token):
            if e.t > t:
                return shown, False
            shown.append(e)
        elif isinstance(e, Step):
            if e.t > t:
                return shown, False
            shown.extend(pending)
            shown.append(e)
            pending = []
        elif isinstance(e, (Done, Error)):
            if isinstance(e, Done) and e.seconds > t:
                return shown, False
            shown.extend(pending)
            shown.append(e)
            pending = []
        else:
            pending.append(e)
    return shown + pending, True


# ---------------------------------------------------------------- charts

COLORS = {"accepted": "#059669", "rejected": "#dc2626", "correction": "#d97706",
          "extension": "#2563eb", "draft": "#7c3aed", "verify": "#0891b2", "ar": "#6b7280"}


def _figure(title: str, data: list[dict], *, xtitle: str, ytitle: str, empty: str = "",
            **layout) -> "go.Figure":
    import plotly.graph_objects as go  # light (no torch); kept local so import stays cheap

    axis = dict(zeroline=False, showgrid=True, gridcolor="#eceff3", linecolor="#d1d5db",
                ticks="outside", tickcolor="#d1d5db", automargin=True)
    # template "none" plus explicit styling: the stock templates cost ~30 ms per figure
    base = dict(
        title=dict(text=title, font=dict(size=14), x=0.01, xanchor="left"),
        height=300, margin=dict(l=52, r=12, t=40, b=84), template="none",
        paper_bgcolor="white", plot_bgcolor="white",
        font=dict(size=12, color="#374151", family="DejaVu Sans, Arial, sans-serif"),
        xaxis=dict(title=dict(text=xtitle), **axis), yaxis=dict(title=dict(text=ytitle), **axis),
        legend=dict(orientation="h", yanchor="top", y=-0.3, xanchor="left", x=0.0),
        hovermode="closest", bargap=0.15, hoverlabel=dict(bgcolor="white"),
    )
    if not data:
        base["annotations"] = [dict(text=empty or "Run a prompt to fill this chart.", showarrow=False,
                                    xref="paper", yref="paper", x=0.5, y=0.5,
                                    font=dict(size=13, color="#6b7280"))]
        base["xaxis"]["visible"] = base["yaxis"]["visible"] = False
    for k, v in layout.items():
        base[k] = {**base[k], **v} if isinstance(v, dict) and isinstance(base.get(k), dict) else v
    return go.Figure(data=data, layout=base, _validate=False)  # inputs are ours; skip ~80% of the cost


def spec_steps(events: Iterable[Event]) -> list[Step]:
    """The step summaries of a speculative run (an autoregressive run has none that count)."""
    return [e for e in events if isinstance(e, Step)]


def acceptance_figure(events: Sequence[Event]):
    """Share of drafts accepted per step (bars) and cumulative (line)."""
    steps = [s for s in spec_steps(events) if s.draft_len > 0]
    data = []
    if steps:
        x = [s.step for s in steps]
        rate = [s.accepted / s.draft_len for s in steps]
        cum, a, d = [], 0, 0
        for s in steps:
            a, d = a + s.accepted, d + s.draft_len
            cum.append(a / d)
        text = [f"step {s.step}: {s.accepted}/{s.draft_len} accepted" for s in steps]
        data = [dict(type="bar", x=x, y=rate, name="this step", marker=dict(color=COLORS["accepted"]),
                     opacity=0.55, hovertext=text, hoverinfo="text"),
                dict(type="scatter", mode="lines", x=x, y=cum, name="cumulative",
                     line=dict(color="#064e3b", width=3),
                     hovertemplate="cumulative %{y:.0%} after step %{x}<extra></extra>")]
    return _figure("Acceptance rate per step", data, xtitle="verification step",
                   ytitle="drafts accepted", yaxis=dict(range=[0, 1.05], tickformat=".0%"))


def draft_length_figure(events: Sequence[Event]):
    """Draft length per step; hover tells why the schedule changed it."""
    steps = spec_steps(events)
    data = []
    if steps:
        x = [s.step for s in steps]
        why = ["first step"] + [f"step {p.step}: {p.reason or 'schedule'}" for p in steps[:-1]]
        hover = [f"step {s.step}: drafted {s.draft_len}, accepted {s.accepted}<br>length set by {w}"
                 + (f"<br>cut by {s.cut}" if s.cut else "") for s, w in zip(steps, why)]
        data = [dict(type="bar", x=x, y=[s.accepted for s in steps], name="accepted",
                     marker=dict(color=COLORS["accepted"]), opacity=0.45, hoverinfo="skip"),
                dict(type="scatter", mode="lines+markers", x=x, y=[s.draft_len for s in steps],
                     name="draft length", line=dict(color=COLORS["draft"], shape="hv", width=2.5),
                     marker=dict(size=7), hovertext=hover, hoverinfo="text")]
    return _figure("Draft length per step", data, xtitle="verification step", ytitle="tokens",
                   yaxis=dict(rangemode="tozero", dtick=1), barmode="overlay")


def tokens_per_forward_figure(events: Sequence[Event]):
    """New tokens per target forward; autoregressive decoding is always 1."""
    steps = spec_steps(events)
    data = []
    if steps:
        x = [s.step for s in steps]
        mean, total = [], 0
        for i, s in enumerate(steps, 1):
            total += s.new_tokens
            mean.append(total / i)
        data = [dict(type="bar", x=x, y=[s.new_tokens for s in steps], name="this forward",
                     marker=dict(color=COLORS["extension"]), opacity=0.55,
                     hovertemplate="step %{x}: %{y} tokens<extra></extra>"),
                dict(type="scatter", mode="lines", x=x, y=mean, name="mean",
                     line=dict(color="#1e3a8a", width=3),
                     hovertemplate="mean %{y:.2f} after step %{x}<extra></extra>"),
                dict(type="scatter", mode="lines", x=[x[0], x[-1]], y=[1, 1], name="autoregressive",
                     line=dict(color=COLORS["ar"], dash="dash"), hoverinfo="skip")]
    return _figure("Tokens per target forward", data, xtitle="verification step", ytitle="tokens",
                   yaxis=dict(rangemode="tozero"))


def position_figure(events: Sequence[Event]):
    """Acceptance at each draft position: given it was reached (earlier drafts all
    accepted), and given it was drafted."""
    from .metrics import per_position_counts  # pure, torch-free

    counts = [(k + 1, d, r, a) for k, (d, r, a) in enumerate(per_position_counts(events)) if d]
    data = []
    if counts:
        x = [k for k, *_ in counts]
        data = [dict(type="bar", x=x, y=[a / r if r else None for _, _, r, a in counts],
                     marker=dict(color=COLORS["accepted"]), name="given reached",
                     hovertext=[f"position {k}: {a} accepted of {r} reached" for k, _, r, a in counts],
                     hoverinfo="text"),
                dict(type="scatter", mode="lines+markers", x=x, y=[a / d for _, d, _, a in counts],
                     name="given drafted", line=dict(color="#6b7280", dash="dot"),
                     hovertext=[f"position {k}: {a} accepted of {d} drafted" for k, d, _, a in counts],
                     hoverinfo="text")]
    return _figure("Acceptance by draft position", data, xtitle="position in draft",
                   ytitle="accepted", yaxis=dict(range=[0, 1.05], tickformat=".0%"),
                   xaxis=dict(dtick=1))


def timing_figure(events: Sequence[Event], ar_events: Sequence[Event] = ()):
    """Drafting vs verification time per step, against one autoregressive forward."""
    steps = spec_steps(events)
    data = []
    if steps:
        x = [s.step for s in steps]
        data = [dict(type="bar", x=x, y=[1000 * s.draft_seconds for s in steps], name="draft",
                     marker=dict(color=COLORS["draft"]),
                     hovertemplate="step %{x}: draft %{y:.1f} ms<extra></extra>"),
                dict(type="bar", x=x, y=[1000 * s.verify_seconds for s in steps], name="verify",
                     marker=dict(color=COLORS["verify"]),
                     hovertemplate="step %{x}: verify %{y:.1f} ms<extra></extra>")]
        ar = [s.verify_seconds + s.draft_seconds for s in spec_steps(ar_events)]
        if ar:
            ms = 1000 * sorted(ar)[len(ar) // 2]
            data.append(dict(type="scatter", mode="lines", x=[x[0], x[-1]], y=[ms, ms],
                             name="autoregressive",
                             line=dict(color=COLORS["ar"], dash="dash"),
                             hovertemplate="autoregressive forward %{y:.1f} ms<extra></extra>"))
    return _figure("Draft vs verify time per step", data, xtitle="verification step", ytitle="ms",
                   barmode="stack")


def all_figures(spec: Sequence[Event], ar: Sequence[Event] = ()) -> dict:
    """Every chart, by the elem_id it is shown under."""
    return {
        "acceptance-plot": acceptance_figure(spec),
        "draft-length-plot": draft_length_figure(spec),
        "tokens-per-forward-plot": tokens_per_forward_figure(spec),
        "position-plot": position_figure(spec),
        "timing-plot": timing_figure(spec, ar),
    }
