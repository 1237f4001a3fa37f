"""Metrics: pure functions over event streams.

Every function takes an iterable of :mod:`mtp_viz.events` objects: one generation, or
several generations concatenated (counts are pooled across them; each ``Step`` event
closes the step whose drafted/accepted/rejected/bonus events precede it). Nothing here
imports torch; the benchmark, the CLI and the app's "measured vs theory" panel all use
the same functions.

Definitions (speculative mode):

- acceptance rate = accepted ÷ drafted, over all steps.
- α (alpha) = accepted ÷ (accepted + rejections), where a rejection is a step that ended
  with a correction (the maximum-likelihood α of Leviathan et al., see
  :func:`mtp_viz.theory.alpha_mle`).
- mean accepted length τ = tokens per target forward, the target's own token included.
- per-position acceptance at position k: *unconditional* = P(draft k accepted | draft k
  was drafted); *conditional* = P(draft k accepted | drafts 0..k-1 were accepted).
- cost coefficient c = drafter seconds per drafted token ÷ target seconds per step.
"""
from __future__ import annotations

import html
from dataclasses import asdict, dataclass, field
from typing import Iterable, Sequence

from .events import Bonus, Done, Event, Rejected, Start, Step, Token
from . import theory

__all__ = [
    "StepRecord", "Summary", "step_records", "per_step_acceptance", "per_position_counts",
    "per_position_acceptance", "acceptance_rate", "alpha_estimate", "mean_accepted_length",
    "drafter_seconds_per_token", "target_step_seconds", "cost_coefficient", "summarize",
    "theory_panel_html",
]


@dataclass(frozen=True)
class StepRecord:
    """One verification step, reduced to what the metrics need."""
    draft_len: int
    accepted: int
    new_tokens: int
    rejected: bool            # the target disagreed with draft number ``accepted``
    cut: str = ""
    draft_seconds: float = 0.0
    verify_seconds: float = 0.0


def step_records(events: Iterable[Event]) -> list[StepRecord]:
    """Speculative steps in order. Autoregressive steps (with ``Token`` events) are skipped.

    A step counts as a rejection when it closes with a correction bonus, or has a
    ``Rejected`` event at index ``accepted`` (the first disagreement; its correction may
    have been cut by the token limit), or accepted fewer drafts than it drafted without
    being cut short (a cut step with neither stopped for its own reasons).
    """
    out: list[StepRecord] = []
    correction = False
    token_seen = False
    rejected_at: set[int] = set()
    for e in events:
        if isinstance(e, Bonus):
            correction = correction or e.kind == "correction"
        elif isinstance(e, Rejected):
            rejected_at.add(e.index)
        elif isinstance(e, Token):
            token_seen = True
        elif isinstance(e, Step):
            if not token_seen:
                rejected = (correction or e.accepted in rejected_at
                            or (e.accepted < e.draft_len and not e.cut))
                new = e.new_tokens or e.accepted + (0 if e.cut else 1)
                out.append(StepRecord(e.draft_len, e.accepted, new, rejected, e.cut,
                                      e.draft_seconds, e.verify_seconds))
            correction = token_seen = False
            rejected_at = set()
        elif isinstance(e, Start):
            correction = token_seen = False
            rejected_at = set()
    return out


def per_step_acceptance(events: Iterable[Event]) -> list[float | None]:
    """accepted ÷ drafted for each speculative step (None where nothing was drafted)."""
    return [r.accepted / r.draft_len if r.draft_len else None for r in step_records(events)]


def per_position_counts(events: Iterable[Event]) -> list[tuple[int, int, int]]:
    """For each draft position k: (drafted, reached, accepted).

    drafted: steps that drafted position k; reached: those whose drafts 0..k-1 were all
    accepted and where position k was actually judged (not cut short); accepted: those
    that accepted draft k.
    """
    counts: list[list[int]] = []
    for r in step_records(events):
        judged = r.accepted + (1 if r.rejected else 0)
        for k in range(r.draft_len):
            while len(counts) <= k:
                counts.append([0, 0, 0])
            counts[k][0] += 1
            counts[k][1] += 1 if k < judged else 0
            counts[k][2] += 1 if k < r.accepted else 0
    return [tuple(c) for c in counts]


def per_position_acceptance(events: Iterable[Event], conditional: bool = True) -> list[float | None]:
    """Acceptance of each draft position, conditional (given the earlier drafts were
    accepted) or unconditional (given it was drafted); None where undefined."""
    out = []
    for drafted, reached, accepted in per_position_counts(events):
        n = reached if conditional else drafted
        out.append(accepted / n if n else None)
    return out


def acceptance_rate(events: Iterable[Event]) -> float:
    """accepted ÷ drafted over all steps (0 when nothing was drafted)."""
    recs = step_records(events)
    drafted = sum(r.draft_len for r in recs)
    return sum(r.accepted for r in recs) / drafted if drafted else 0.0


def alpha_estimate(events: Iterable[Event]) -> float:
    """Leviathan's α, estimated by maximum likelihood from accepted drafts and rejections."""
    recs = step_records(events)
    return theory.alpha_mle(sum(r.accepted for r in recs), sum(r.rejected for r in recs))


def _forwards_and_tokens(events: Sequence[Event]) -> tuple[int, int]:
    done = [e for e in events if isinstance(e, Done)]
    if done:
        return sum(d.target_forwards for d in done), sum(d.new_tokens for d in done)
    steps = [e for e in events if isinstance(e, Step)]
    return len(steps), sum(s.new_tokens for s in steps)


def mean_accepted_length(events: Iterable[Event]) -> float:
    """τ: new tokens per target forward, the target's own token included.

    Uses the ``Done`` totals when present (so a prefill forward that produced no
    token counts as the engine reports it), else the ``Step`` events.
    """
    forwards, tokens = _forwards_and_tokens(list(events))
    return tokens / forwards if forwards else 0.0


def drafter_seconds_per_token(events: Iterable[Event]) -> float:
    """Drafter time per drafted token: Σ draft_seconds ÷ Σ draft_len."""
    recs = step_records(events)
    drafted = sum(r.draft_len for r in recs)
    return sum(r.draft_seconds for r in recs) / drafted if drafted else 0.0


def _decode_step_seconds(events: Sequence[Event]) -> list[float]:
    """Timed target forwards, the prefill (first step of each generation) left out:
    autoregressive forwards, or speculative verifications that checked drafts."""
    out, first, token_seen = [], True, False
    for e in events:
        if isinstance(e, Start):
            first = True
        elif isinstance(e, Token):
            token_seen = True
        elif isinstance(e, Step):
            if not first and e.verify_seconds > 0 and (token_seen or e.draft_len > 0):
                out.append(e.verify_seconds)
            first = token_seen = False
    return out


def target_step_seconds(events: Iterable[Event]) -> float:
    """Mean time of one target decode step (the prefill left out): in an autoregressive
    stream the mean forward time (else Done.seconds ÷ forwards); in a speculative stream
    the mean verification time (which covers γ+1 tokens, so it is an upper bound)."""
    events = list(events)
    timed = _decode_step_seconds(events)
    if timed:
        return sum(timed) / len(timed)
    forwards, _ = _forwards_and_tokens(events)
    seconds = sum(e.seconds for e in events if isinstance(e, Done))
    return seconds / forwards if forwards else 0.0


def cost_coefficient(events: Iterable[Event], baseline: Iterable[Event] | None = None) -> float:
    """c = drafter seconds per drafted token ÷ target seconds per step.

    The target step time comes from ``baseline`` (an autoregressive stream) when given,
    else from the speculative stream's own verification steps.
    """
    events = list(events)
    t_target = target_step_seconds(baseline if baseline is not None else events)
    return drafter_seconds_per_token(events) / t_target if t_target > 0 else 0.0


@dataclass
class Summary:
    """Everything the bench and the app report for one stream (or pooled streams)."""
    mode: str = ""
    generations: int = 0
    new_tokens: int = 0
    target_forwards: int = 0
    seconds: float = 0.0
    tokens_per_second: float = 0.0
    steps: int = 0
    drafted: int = 0
    accepted: int = 0
    rejections: int = 0
    acceptance_rate: float = 0.0
    alpha: float = 0.0
    mean_accepted_length: float = 0.0
    mean_draft_len: float = 0.0        # over steps that drafted (the prefill step does not)
    drafter_seconds_per_token: float = 0.0
    verify_seconds_per_step: float = 0.0
    per_position_conditional: list = field(default_factory=list)
    per_position_unconditional: list = field(default_factory=list)

    def to_dict(self) -> dict:
        return asdict(self)


def summarize(events: Iterable[Event]) -> Summary:
    """Pool every metric of this module over the stream."""
    events = list(events)
    recs = step_records(events)
    starts = [e for e in events if isinstance(e, Start)]
    forwards, tokens = _forwards_and_tokens(events)
    seconds = sum(e.seconds for e in events if isinstance(e, Done))
    drafted = sum(r.draft_len for r in recs)
    accepted = sum(r.accepted for r in recs)
    rejections = sum(r.rejected for r in recs)
    verify = _decode_step_seconds(events)
    drafting = [r for r in recs if r.draft_len > 0]
    return Summary(
        mode=starts[0].mode if starts else "",
        generations=len(starts),
        new_tokens=tokens,
        target_forwards=forwards,
        seconds=seconds,
        tokens_per_second=tokens / seconds if seconds > 0 else 0.0,
        steps=len(recs),
        drafted=drafted,
        accepted=accepted,
        rejections=rejections,
        acceptance_rate=accepted / drafted if drafted else 0.0,
        alpha=theory.alpha_mle(accepted, rejections),
        mean_accepted_length=tokens / forwards if forwards else 0.0,
        mean_draft_len=drafted / len(drafting) if drafting else 0.0,
        drafter_seconds_per_token=drafter_seconds_per_token(events),
        verify_seconds_per_step=sum(verify) / len(verify) if verify else 0.0,
        per_position_conditional=per_position_acceptance(events, conditional=True),
        per_position_unconditional=per_position_acceptance(events, conditional=False),
    )


def theory_panel_html(events: Iterable[Event], baseline: Iterable[Event] | None = None,
                      cap: int = 16) -> str:
    """A small HTML panel: measured numbers beside Leviathan et al.'s prediction.

    ``baseline`` (an autoregressive stream of the same prompt) gives the target step
    time and a measured speedup; without it c uses the verification time and the
    measured speedup is left out. All text is HTML-escaped.
    """
    events = list(events)
    s = summarize(events)
    esc = html.escape
    if s.steps == 0 or s.drafted == 0:
        return ('<div class="mtp-theory"><p>No drafted tokens yet: the theory panel '
                'needs a speculative run.</p></div>')
    base = list(baseline) if baseline is not None else None
    c = cost_coefficient(events, base)
    gamma = s.mean_draft_len
    predicted_tau = theory.expected_tokens(s.alpha, gamma)
    predicted = theory.predicted_speedup(s.alpha, gamma, c)
    g_star, s_star = theory.optimal_gamma(s.alpha, c, cap)
    rows = [
        ("acceptance rate (accepted ÷ drafted)", f"{s.acceptance_rate:.1%}", ""),
        ("α (per-token acceptance, MLE)", f"{s.alpha:.3f}", ""),
        ("mean draft length γ", f"{s.mean_draft_len:.2f}", ""),
        ("tokens per target forward τ", f"{s.mean_accepted_length:.2f}",
         f"{predicted_tau:.2f} = (1−α^(γ+1))/(1−α)"),
        ("cost coefficient c", f"{c:.3f}", "drafter step ÷ target step"),
    ]
    if base is not None:
        bs = summarize(base)
        measured = s.tokens_per_second / bs.tokens_per_second if bs.tokens_per_second else 0.0
        rows.append(("speedup over autoregressive", f"×{measured:.2f}",
                     f"×{predicted:.2f} predicted ({measured / predicted:.0%} of it)"
                     if predicted > 0 else ""))
        t_ar = target_step_seconds(base)
        if t_ar > 0 and s.verify_seconds_per_step > 0:
            # Leviathan et al. assume verifying γ+1 tokens costs one target step; where it
            # costs v steps instead, the prediction becomes τ / (γc + v).
            v = s.verify_seconds_per_step / t_ar
            rows.append(("verification cost v (in target steps)", f"{v:.2f}",
                         f"×{predicted_tau / (gamma * c + v):.2f} predicted with this v"))
    else:
        rows.append(("predicted speedup", "", f"×{predicted:.2f} = τ/(γc+1)"))
    rows.append(("best draft length γ*", "", f"{g_star} (×{s_star:.2f} predicted)"))
    body = "".join(f"<tr><td>{esc(a)}</td><td>{esc(b)}</td><td>{esc(t)}</td></tr>"
                   for a, b, t in rows)
    bars = []
    for k, (cond, unc) in enumerate(zip(s.per_position_conditional,
                                        s.per_position_unconditional)):
        if cond is None and unc is None:
            continue
        cv, uv = cond or 0.0, unc or 0.0
        bars.append(
            f'<div class="mtp-pos"><span>{k + 1}</span>'
            f'<span class="mtp-bar" style="display:inline-block;width:{cv * 120:.0f}px;'
            f'background:#4c9be8;height:0.8em" title="conditional {cv:.0%}"></span> '
            f'{cv:.0%} <small>(unconditional {uv:.0%})</small></div>')
    return ('<div class="mtp-theory"><table><thead><tr><th>measure</th><th>measured</th>'
            f'<th>theory</th></tr></thead><tbody>{body}</tbody></table>'
            '<p><b>Acceptance by draft position</b> (given the earlier drafts were '
            f'accepted)</p>{"".join(bars)}</div>')
