"""Metrics: pure functions over event streams.

Every function takes an iterable of :mod:`mtp_viz.engine.events` objects: one generation, or
several generations concatenated (counts are pooled across them; each ``Step`` event
closes the step whose drafted/accepted/rejected/bonus events precede it). Nothing here
imports torch; the benchmark, the CLI and the app's "measured vs theory" panel all use
the same functions.

Definitions (speculative mode):

- acceptance rate = accepted ÷ drafted, over all steps.
- α (alpha) = accepted ÷ (accepted + rejections), where a rejection is a step that ended
  with a correction (the maximum-likelihood α of Leviathan et al., see
  :func:`mtp_viz.engine.theory.alpha_mle`).
- τ (:func:`tau`) = tokens per target forward after the prefill, the target's own token
  included (:func:`mtp_viz.engine.events.tau_of`).
- per-position acceptance at position k: *unconditional* = P(draft k accepted | draft k
  was drafted); *conditional* = P(draft k accepted | drafts 0..k-1 were accepted).
- cost coefficient c = drafter seconds per drafted token ÷ target seconds per step.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Iterable, Sequence

from mtp_viz.engine import theory
from mtp_viz.engine.decoding import MAX_DRAFT_TOKENS
from mtp_viz.engine.events import Bonus, Done, Event, Rejected, Start, Step, Token, tau_of

from . import experts

__all__ = [
    "StepRecord", "Summary", "step_records", "per_step_acceptance", "per_position_counts",
    "per_position_acceptance", "acceptance_rate", "alpha_estimate", "tau",
    "drafter_seconds_per_token", "target_step_seconds", "cost_coefficient", "summarize",
    "TheoryCheck", "theory_check", "drift",
]


@dataclass(frozen=True)
class StepRecord:
    """One verification step, reduced to what the metrics need."""
    draft_tokens: int
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
                            or (e.accepted < e.draft_tokens and not e.cut))
                new = e.new_tokens or e.accepted + (0 if e.cut else 1)
                out.append(StepRecord(e.draft_tokens, e.accepted, new, rejected, e.cut,
                                      e.draft_seconds, e.verify_seconds))
            correction = token_seen = False
            rejected_at = set()
        elif isinstance(e, Start):
            correction = token_seen = False
            rejected_at = set()
    return out


def per_step_acceptance(events: Iterable[Event]) -> list[float | None]:
    """accepted ÷ drafted for each speculative step (None where nothing was drafted)."""
    return [r.accepted / r.draft_tokens if r.draft_tokens else None for r in step_records(events)]


def per_position_counts(events: Iterable[Event]) -> list[tuple[int, int, int]]:
    """For each draft position k: (drafted, reached, accepted).

    drafted: steps that drafted position k; reached: those whose drafts 0..k-1 were all
    accepted and where position k was actually judged (not cut short); accepted: those
    that accepted draft k.
    """
    counts: list[list[int]] = []
    for r in step_records(events):
        judged = r.accepted + (1 if r.rejected else 0)
        for k in range(r.draft_tokens):
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
    drafted = sum(r.draft_tokens for r in recs)
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


def tau(events: Iterable[Event]) -> float | None:
    """τ, new tokens per target forward after each generation's prefill, the target's own
    token included (:func:`mtp_viz.engine.events.tau_of`); None before any verification.

    Uses the ``Done`` totals when present, else the ``Step`` events.
    """
    events = list(events)
    forwards, tokens = _forwards_and_tokens(events)
    return tau_of(tokens, forwards, _generations(events))


def _generations(events: Sequence[Event]) -> int:
    return sum(isinstance(e, Start) for e in events) or (1 if events else 0)


def drafter_seconds_per_token(events: Iterable[Event]) -> float:
    """Drafter time per drafted token: Σ draft_seconds ÷ Σ draft_tokens."""
    recs = step_records(events)
    drafted = sum(r.draft_tokens for r in recs)
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
            if not first and e.verify_seconds > 0 and (token_seen or e.draft_tokens > 0):
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
    tau: float | None = None           # τ after the prefill (engine.events.tau_of); None before any verification
    mean_draft_tokens: float = 0.0     # over steps that drafted (the prefill step does not)
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
    drafted = sum(r.draft_tokens for r in recs)
    accepted = sum(r.accepted for r in recs)
    rejections = sum(r.rejected for r in recs)
    verify = _decode_step_seconds(events)
    drafting = [r for r in recs if r.draft_tokens > 0]
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
        tau=tau_of(tokens, forwards, _generations(events)),
        mean_draft_tokens=drafted / len(drafting) if drafting else 0.0,
        drafter_seconds_per_token=drafter_seconds_per_token(events),
        verify_seconds_per_step=sum(verify) / len(verify) if verify else 0.0,
        per_position_conditional=per_position_acceptance(events, conditional=True),
        per_position_unconditional=per_position_acceptance(events, conditional=False),
    )


@dataclass(frozen=True)
class TheoryCheck:
    """A run's measured numbers beside Leviathan et al.'s prediction (see :mod:`mtp_viz.engine.theory`).

    Every field is measured or computed from measured quantities. ``v`` (verification
    cost in target steps) needs an autoregressive baseline; it is ``None`` when the
    baseline is missing or when the measured ratio is below 1, which no real forward
    over γ+1 tokens achieves: such a value is timing noise, not a cost."""
    acceptance_rate: float
    alpha: float
    draft_tokens: float               # mean draft length over steps that drafted
    tau: float | None                 # measured τ, tokens per target forward after the prefill
    tau_predicted: float              # Eq. 1 at the measured α and γ
    c: float                          # drafter step ÷ target step
    speedup_predicted: float          # Eq. 2: τ(α, γ) / (γc + 1)
    optimal_draft_tokens: int
    speedup_star: float
    speedup_measured: float | None = None
    v: float | None = None            # verify seconds per step ÷ autoregressive step seconds
    v_raw: float | None = None        # the ratio as measured, even when below 1
    speedup_predicted_v: float | None = None  # τ_measured / (γc + v), when v is meaningful
    per_position_conditional: tuple = ()
    per_position_unconditional: tuple = ()
    timed: bool = True                # False: the source reports no draft/verify times (vLLM),
                                      # so c, v and every predicted speedup mean nothing
    experts_touched: float | None = None  # counted mixture of experts: distinct experts per layer
                                          # per verification that drafted, averaged (analysis.experts)
    experts_top_k: int = 0            # ...what one plain token reads per layer
    experts_total: int = 0            # ...of this many experts per layer


def theory_check(events: Iterable[Event], baseline: Iterable[Event] | None = None,
                 cap: int = MAX_DRAFT_TOKENS) -> TheoryCheck | None:
    """The numbers of the "measured vs theory" panel; None when nothing was drafted."""
    events = list(events)
    s = summarize(events)
    if s.steps == 0 or s.drafted == 0:
        return None
    base = list(baseline) if baseline is not None else None
    c = cost_coefficient(events, base)
    draft_tokens = s.mean_draft_tokens
    g_star, s_star = theory.optimal_draft_tokens(s.alpha, c, cap)
    measured = v = v_raw = predicted_v = None
    if base is not None:
        bs = summarize(base)
        measured = s.tokens_per_second / bs.tokens_per_second if bs.tokens_per_second else None
        t_ar = target_step_seconds(base)
        if t_ar > 0 and s.verify_seconds_per_step > 0:
            v_raw = s.verify_seconds_per_step / t_ar
            if v_raw >= 1.0:
                # Leviathan et al. assume verifying γ+1 tokens costs one target step; where
                # it costs v steps instead, the prediction becomes τ / (γc + v).
                v = v_raw
                predicted_v = s.tau / (draft_tokens * c + v) if s.tau is not None else None
    return TheoryCheck(
        acceptance_rate=s.acceptance_rate, alpha=s.alpha, draft_tokens=draft_tokens,
        tau=s.tau, tau_predicted=theory.expected_tokens(s.alpha, draft_tokens),
        c=c, speedup_predicted=theory.predicted_speedup(s.alpha, draft_tokens, c),
        optimal_draft_tokens=g_star, speedup_star=s_star, speedup_measured=measured, v=v, v_raw=v_raw,
        speedup_predicted_v=predicted_v,
        per_position_conditional=tuple(s.per_position_conditional),
        per_position_unconditional=tuple(s.per_position_unconditional),
        timed=any(r.draft_seconds or r.verify_seconds for r in step_records(events)), **_experts_fields(events))


def _experts_fields(events: Sequence[Event]) -> dict:
    """The theory check's experts fields: empty unless the run counted its experts."""
    moe = experts.moe_of(events) or {}
    touched = [s.mean for s in experts.expert_steps(events) if s.draft_tokens > 0]
    if not touched:
        return {}
    return {"experts_touched": sum(touched) / len(touched), "experts_top_k": int(moe.get("top_k", 0)),
            "experts_total": int(moe.get("num_experts", 0))}


def drift(outputs: Sequence[Sequence[int]], references: Sequence[Sequence[int]]) -> float | None:
    """How far greedy outputs depart from reference outputs of the same prompts (a
    quantized target's plain decoding against the float32 target's): per prompt, the
    share of generated tokens after the first one that differs,

        drift = 1 − (common prefix length) ÷ max(len(output), len(reference)),

    averaged over prompts; 0 when every output is its reference, 1 when every first token
    differs. None for no prompts. It measures the precision's effect on the text, not
    speculation's: both sides are plain decoding."""
    shares = []
    for out, ref in zip(outputs, references, strict=True):
        longest = max(len(out), len(ref))
        common = next((i for i, (a, b) in enumerate(zip(out, ref)) if a != b), min(len(out), len(ref)))
        shares.append(1 - common / longest if longest else 0.0)
    return sum(shares) / len(shares) if shares else None
