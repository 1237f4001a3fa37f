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

from ..events import Accepted, Bonus, Done, Drafted, Error, Event, Rejected, Start, Step, Token
from .teach_view import explain

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
                                    title=f"step {e.step} · draft {e.index + 1} accepted · {_prob('p', e.p)} {_prob('q', e.q)}"))
        elif isinstance(e, Rejected):
            parts.append(token_span("rejected", e.text, e.token_id, step=e.step, index=e.index,
                                    title=f"step {e.step} · draft {e.index + 1} rejected · {_prob('p', e.p)} {_prob('q', e.q)}"))
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
    return max(0, step.draft_len - max(step.agreed, step.accepted) - shown)


def rejected_count_html(step: Step, shown: int) -> str:
    """``<span class="mv-rejcount" data-rejected=N>✗N</span>`` for a step's
    :func:`unreported_rejections`; "" when every rejected draft is shown as a token."""
    n = unreported_rejections(step, shown)
    if n <= 0:
        return ""
    return (f'<span class="mv-rejcount" data-step="{step.step}" data-drafted="{step.draft_len}" '
            f'data-rejected="{n}" title="step {step.step}: {step.draft_len} drafted, {n} rejected; '
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


def _compare_div(speedup: float | None, spec_tps: float, ar_tps: float, basis: str, threads: int,
                 body: str) -> str:
    """``#compare``: the figure's hooks as data attributes, the badges inside."""
    attrs = ""
    if speedup is not None:
        attrs = (f' data-speedup="{speedup:.4f}" data-spec-tps="{spec_tps:.3f}" data-ar-tps="{ar_tps:.3f}"'
                 f' data-basis="{html.escape(basis)}" data-threads="{threads}"')
    return f'<div id="compare" class="mv-compare"{attrs}>{body}</div>' + explain("compare", corner=True)


def _threads(threads: int) -> str:
    return f", {threads} torch thread{'s' if threads != 1 else ''}" if threads else ""


def compare_html(spec: RunStats, ar: RunStats, *, greedy: bool, threads: int = 0) -> str:
    """The speedup of one run of each mode and, under greedy decoding, whether both
    outputs are token-identical. One run each cannot name a winner: the figure says
    what it is and points to Measure."""
    if not (spec.done and ar.done) or not spec.tokens or not ar.tokens \
            or not (spec.tokens_per_second and ar.tokens_per_second):
        return _compare_div(None, 0, 0, "", threads, identity_badge(spec, ar) if greedy and spec.done
                            and ar.done and spec.tokens and ar.tokens else "")
    x = spec.tokens_per_second / ar.tokens_per_second
    parts = [f'<span class="mv-badge mv-speedup" title="Measure repeats both modes and names a winner '
             f'only when every repeat agrees">speculative ran at <b>×{x:.2f}</b> the speed '
             f'<small>({spec.tokens_per_second:.1f} vs {ar.tokens_per_second:.1f} tokens/s · one run each, '
             f'in turns{_threads(threads)})</small></span>']
    if greedy:
        parts.append(identity_badge(spec, ar))
    return _compare_div(x, spec.tokens_per_second, ar.tokens_per_second, "single run", threads,
                        "".join(parts))


def measurement_html(m) -> str:
    """Measure's result (:class:`mtp_viz.app.measure.Measurement`): the median of the
    repeats, their range, and a winner only when every repeat agrees."""
    cls = {"faster": "mv-ok", "slower": "mv-warn"}.get(m.verdict, "mv-neutral")
    lo, hi = min(m.ratios), max(m.ratios)
    if m.verdict == "too close to call":
        head = (f"too close to call: median <b>×{m.median:.2f}</b>, but the {m.repeats} repeats "
                f"ranged from ×{lo:.2f} to ×{hi:.2f}")
    else:
        head = (f"speculative is <b>×{m.median:.2f}</b> {m.verdict} (median of {m.repeats} repeats, "
                f"range ×{lo:.2f}–×{hi:.2f})")
    body = (f'<span class="mv-badge {cls} mv-speedup">{head}<small> · {m.spec_tps:.1f} vs '
            f'{m.ar_tps:.1f} tokens/s{_threads(m.threads)}</small></span>')
    return _compare_div(m.median, m.spec_tps, m.ar_tps, f"median of {m.repeats}", m.threads, body)


def identity_badge(spec: RunStats, ar: RunStats) -> str:
    n = min(len(spec.ids), len(ar.ids))
    first = next((i for i in range(n) if spec.ids[i] != ar.ids[i]), None)
    if first is None and len(spec.ids) == len(ar.ids):
        return f'<span class="mv-badge mv-ok">✓ token-identical ({n} tokens)</span>'
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


def events_through_step(events: Sequence[Event], step: int) -> list[Event]:
    """The prefix of a recorded run after its step ``step``: every event of steps up to
    it (a speculative step's drafts, verdicts and summary; an autoregressive token), and
    the run's ``done`` only once every step is in."""
    for i, e in enumerate(events):
        if getattr(e, "step", 0) > step:
            return list(events[:i])
    return list(events)
