"""Typed events: the one contract between the engine and every consumer.

The engine yields these; the CLI, the metrics, the trace recorder and the UI only
read them. Every event is a frozen dataclass that round-trips exactly through JSON:
``Event.from_dict(json.loads(json.dumps(e.to_dict()))) == e``.

Invariants (docs/events.md has the whole contract): the generated sequence is exactly the ``accepted`` and
``bonus`` events (speculative mode) or the ``token`` events (autoregressive mode), in
stream order. Within a step all ``drafted`` come first, then ``accepted`` (indices
0..n-1), then ``rejected``, then at most one ``bonus``, then the ``step`` summary.

Probabilities: ``q`` is the drafter's probability of the token under its processed
(temperature/top-k/top-p) distribution, the one the draft was drawn from; ``p`` is the
target's probability of the token under its processed distribution. Under greedy
decoding both are the softmax of the raw logits (temperature 1), which is what a
viewer wants to see.

Top candidates (optional, recorded only when the engine is asked with ``top=k``; see
:mod:`mtp_viz.engine.topk`): ``p_top_ids``/``p_top``/``p_top_text`` are the target's k most
probable tokens at a token's position under its processed distribution, best first,
with their probabilities and text pieces; ``q_top_*`` the drafter's, on ``drafted``;
``residual_top_*`` on a correction drawn under sampling, the top of
norm(max(0, p − q)) it was drawn from. They are empty when not recorded and then left
out of ``to_dict``, so a run without them serializes exactly as before and older
traces read unchanged.

Experts touched (optional, recorded only when the engine is asked with ``experts=True``
on a mixture-of-experts target; see :mod:`mtp_viz.engine.experts`):
``Step.experts_per_layer`` holds, per MoE layer, the number of distinct experts that
step's target forward routed its tokens to. Empty otherwise, and then left out.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

__all__ = [
    "Event", "Start", "Drafted", "Accepted", "Rejected", "Bonus", "Token", "Step", "Done",
    "Error", "Ran", "event_from_dict", "renamed", "verdicts", "EVENT_TYPES", "RENAMED", "tau_of",
]


@dataclass(frozen=True)
class Event:
    type: ClassVar[str] = "event"

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"type": self.type}
        for f in dataclasses.fields(self):
            v = getattr(self, f.name)
            if f.metadata.get("optional") and not v:
                continue  # an optional field left empty is not written
            d[f.name] = _plain(v)
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "Event":
        if cls is Event:
            return event_from_dict(d)
        names = {f.name: f for f in dataclasses.fields(cls)}
        kwargs = {k: _frozen(v) for k, v in renamed(d).items() if k in names}
        return cls(**kwargs)


def _optional(default: Any = ()) -> Any:
    """A field recorded only on request (top candidates): omitted from JSON when empty."""
    return field(default=default, metadata={"optional": True})


def _plain(v: Any) -> Any:
    """Tuples (kept for immutability) become lists in JSON; mappings stay dicts."""
    if isinstance(v, tuple):
        return [_plain(x) for x in v]
    if isinstance(v, dict):
        return {k: _plain(x) for k, x in v.items()}
    return v


def _frozen(v: Any) -> Any:
    if isinstance(v, list):
        return tuple(_frozen(x) for x in v)
    if isinstance(v, dict):
        return {k: _frozen(x) for k, x in v.items()}
    return v


@dataclass(frozen=True)
class Ran:
    """What produced a run, in ``Start.settings["ran"]``: every source says it, and
    views and analysis read it, never a source's name. ``engine`` is what ``data-engine``
    shows; ``label`` how a view names it; ``rejected_ids`` whether the stream names each
    rejected draft (a server says only how many); ``routing`` whether the source can
    report which experts its router chose."""
    engine: str = "eager"
    label: str = "eager engine"
    rejected_ids: bool = True
    routing: bool = True

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def of(cls, settings: dict[str, Any]) -> "Ran":
        """What a start event's settings say ran; a trace written before ``ran`` existed
        says it in older keys (``engine``: "compiled" or "eager"; a server's ``backend``)."""
        said = settings.get("ran")
        if isinstance(said, dict):
            names = {f.name for f in dataclasses.fields(cls)}
            return cls(**{k: v for k, v in said.items() if k in names})
        older = _BEFORE_RAN.get(settings.get("backend")) or _BEFORE_RAN.get(settings.get("engine"))
        return older or cls()


def tau_of(new_tokens: int, target_forwards: int, generations: int = 1) -> float | None:
    """τ, tokens per target forward after the prefill: each generation's prefill forward
    writes its first token, and every later forward verifies, keeping its accepted drafts
    and the target's own token, so τ = (new tokens − generations) ÷ (forwards − generations).
    None before any verification. The one formula every source, view and study reports
    (vLLM's ``mean_acceptance_length`` leaves the prefill out the same way)."""
    verifications = target_forwards - generations
    return (new_tokens - generations) / verifications if verifications > 0 else None


# Fields older traces and clients named otherwise: draft length had several names, and τ was
# ``mean_accepted_length`` over every forward, the prefill included (recomputed on reading).
RENAMED = {"draft_len": "draft_tokens", "next_draft_len": "next_draft_tokens"}


def renamed(d: dict[str, Any]) -> dict[str, Any]:
    """An event's dict with older field names read as today's (:data:`RENAMED`)."""
    if not any(k in d for k in (*RENAMED, "mean_accepted_length")):
        return d
    out = {RENAMED.get(k, k): v for k, v in d.items() if k != "mean_accepted_length"}
    if d.get("type") == "done" and "tau" not in out and isinstance(out.get("new_tokens"), int) \
            and isinstance(out.get("target_forwards"), int):
        out["tau"] = tau_of(out["new_tokens"], out["target_forwards"]) or 0.0
    return out


# what older traces said in place of ``ran``, by their ``backend`` or ``engine`` key
_BEFORE_RAN = {"vllm": Ran("vllm", "vLLM server", rejected_ids=False, routing=False),
               "compiled": Ran("compiled", "compiled engine", routing=False)}


@dataclass(frozen=True)
class Start(Event):
    """First event of every generation."""
    type: ClassVar[str] = "start"
    mode: str                      # "speculative" or "autoregressive"
    prompt_tokens: int
    prompt_ids: tuple[int, ...] = ()
    settings: dict[str, Any] = field(default_factory=dict)  # drafter, schedule, sampling, limits, ran

    @property
    def ran(self) -> Ran:
        return Ran.of(self.settings)


@dataclass(frozen=True)
class Drafted(Event):
    type: ClassVar[str] = "drafted"
    step: int                      # verification step, from 1
    index: int                     # 0-based position in this step's draft
    token_id: int
    text: str = ""
    q: float = 1.0                 # drafter's probability of this token
    q_top_ids: tuple[int, ...] = _optional()     # drafter's top-k tokens here, best first
    q_top: tuple[float, ...] = _optional()       # their probabilities under q
    q_top_text: tuple[str, ...] = _optional()
    clusters: tuple[int, ...] = _optional()      # clustered head: the clusters it scored, best first


@dataclass(frozen=True)
class Accepted(Event):
    type: ClassVar[str] = "accepted"
    step: int
    index: int
    token_id: int
    text: str = ""
    p: float = 1.0                 # target's probability of this token
    q: float = 1.0
    p_top_ids: tuple[int, ...] = _optional()    # target's top-k tokens here, best first
    p_top: tuple[float, ...] = _optional()       # their probabilities under p
    p_top_text: tuple[str, ...] = _optional()    # and their text pieces


@dataclass(frozen=True)
class Rejected(Event):
    """A draft the target did not keep. Index >= the first rejection are all rejected
    (they were drafted after a token that is no longer in the sequence)."""
    type: ClassVar[str] = "rejected"
    step: int
    index: int
    token_id: int
    text: str = ""
    p: float = 0.0
    q: float = 1.0
    p_top_ids: tuple[int, ...] = _optional()    # target's top-k tokens here, best first
    p_top: tuple[float, ...] = _optional()       # their probabilities under p
    p_top_text: tuple[str, ...] = _optional()    # and their text pieces
    # clustered head: "yes"/"no", whether the target's most probable token here was in
    # the clusters the drafter scored ("" without a clustered head or not recorded)
    target_in_clusters: str = _optional("")


@dataclass(frozen=True)
class Bonus(Event):
    """The target's own token closing a verification step.

    kind: "correction" when it replaces a rejected draft, "extension" when every draft
    was accepted (or none was drafted) and the target adds one more."""
    type: ClassVar[str] = "bonus"
    step: int
    token_id: int
    text: str = ""
    p: float = 1.0
    index: int = 0                 # its position within the step (= accepted count)
    kind: str = "extension"
    p_top_ids: tuple[int, ...] = _optional()    # target's top-k tokens here, best first
    p_top: tuple[float, ...] = _optional()       # their probabilities under p
    p_top_text: tuple[str, ...] = _optional()    # and their text pieces
    residual_top_ids: tuple[int, ...] = _optional()  # a correction under sampling: the top of
    residual_top: tuple[float, ...] = _optional()     # norm(max(0, p - q)) it was drawn from
    residual_top_text: tuple[str, ...] = _optional()


@dataclass(frozen=True)
class Token(Event):
    """Autoregressive mode: one token per target forward."""
    type: ClassVar[str] = "token"
    step: int
    token_id: int
    text: str = ""
    p: float = 1.0
    t: float = 0.0                 # seconds since the start of generation
    p_top_ids: tuple[int, ...] = _optional()    # target's top-k tokens here, best first
    p_top: tuple[float, ...] = _optional()       # their probabilities under p
    p_top_text: tuple[str, ...] = _optional()    # and their text pieces


@dataclass(frozen=True)
class Step(Event):
    """Summary closing each verification step (speculative) or each forward (autoregressive)."""
    type: ClassVar[str] = "step"
    step: int
    draft_tokens: int              # tokens drafted this step (the draft length)
    accepted: int                  # drafts kept this step: the number of its Accepted events
    new_tokens: int = 0            # tokens appended this step (accepted + bonus, after any cut)
    draft_seconds: float = 0.0
    verify_seconds: float = 0.0
    next_draft_tokens: int = 0     # what the schedule chose for the next step
    reason: str = ""               # why the schedule chose it
    cut: str = ""                  # "eos" when tokens after an end-of-sequence were dropped
    t: float = 0.0                 # seconds since the start of generation, at the step's end
    agreed: int = 0                # drafts the target agreed with, before any EOS cut (>= accepted)
    # a mixture-of-experts target, counted on request: per MoE layer, the distinct experts
    # its router sent this step's forward's tokens to (engine.experts)
    experts_per_layer: tuple[int, ...] = _optional()


@dataclass(frozen=True)
class Done(Event):
    type: ClassVar[str] = "done"
    new_tokens: int
    target_forwards: int
    seconds: float
    text: str = ""
    drafter_forwards: int = 0
    drafted: int = 0
    accepted: int = 0
    acceptance_rate: float = 0.0   # accepted / drafted
    tau: float = 0.0               # τ: new tokens per target forward after the prefill (tau_of; 0 before any)
    tokens_per_second: float = 0.0
    stop_reason: str = ""          # "eos", "max_new_tokens" or "stopped"
    generated_ids: tuple[int, ...] = ()
    compile_seconds: float = _optional(0.0)  # graphs the compiled engine compiled in the run, off `seconds`
    # A server source's own per-request metrics, as it sent them (lists as tuples);
    # vLLM: its response's "metrics" object, with "speculative_decoding". Empty locally.
    server_metrics: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def of(cls, generated_ids, target_forwards: int, seconds: float, *, text: str = "", drafter_forwards: int = 0,
           drafted: int = 0, accepted: int = 0, stop_reason: str = "", compile_seconds: float = 0.0,
           server_metrics: dict[str, Any] | None = None) -> "Done":
        """A run's end from what was counted, its rates derived here, once, for every source
        (the engine, transformers' recorder, the servers): acceptance = accepted ÷ drafted,
        τ = :func:`tau_of`, tokens/s = new tokens ÷ seconds (each 0 where its denominator is)."""
        ids = tuple(generated_ids)
        n = len(ids)
        return cls(n, target_forwards, seconds, text, drafter_forwards, drafted, accepted,
                   accepted / drafted if drafted else 0.0, tau_of(n, target_forwards) or 0.0,
                   n / seconds if seconds > 0 else 0.0, stop_reason, ids, compile_seconds=compile_seconds,
                   server_metrics=server_metrics or {})


@dataclass(frozen=True)
class Error(Event):
    type: ClassVar[str] = "error"
    message: str


EVENT_TYPES: dict[str, type[Event]] = {
    c.type: c for c in (Start, Drafted, Accepted, Rejected, Bonus, Token, Step, Done, Error)
}


def verdicts(step: int, drafts: Sequence[int], kept: int, bonus: int | None, *,
             text: Callable[[int, int], str], p: Sequence[float], p_bonus: float,
             q: Sequence[float] | None = None, rejected: Iterable[int] | None = None,
             drafted: int | None = None, extra: Callable[[str, int], dict] | None = None) -> Iterator[Event]:
    """One verification step's verdict, in order: the rule every source follows (the engine,
    transformers' recorder, the servers), written once.

    - :class:`Accepted` for each kept draft, ``drafts[:kept]``;
    - :class:`Rejected` for ``drafts[i]``, ``i`` in ``rejected`` (default: every draft from
      ``kept`` on, each drafted after a token no longer in the sequence);
    - :class:`Bonus` for the target's own token ``bonus`` at index ``kept`` (None: a cut
      dropped it): a "correction" when it replaced a rejected draft (``kept < drafted``,
      ``drafted`` defaulting to ``len(drafts)``), else an "extension".

    ``text(i, token)`` is the piece token ``i`` of the step adds (``i = kept`` for the bonus);
    ``p[i]`` and ``q[i]`` the target's and the drafter's probability of draft ``i`` (q: 1.0 when
    not known); ``extra(kind, i)`` an event's recorded top candidates."""
    extra = extra or (lambda kind, i: {})
    for i in range(kept):
        yield Accepted(step, i, drafts[i], text(i, drafts[i]), p[i], q[i] if q is not None else 1.0,
                       **extra("accepted", i))
    for i in (range(kept, len(drafts)) if rejected is None else rejected):
        yield Rejected(step, i, drafts[i], text(i, drafts[i]), p[i], q[i] if q is not None else 1.0,
                       **extra("rejected", i))
    if bonus is not None:
        kind = "correction" if kept < (len(drafts) if drafted is None else drafted) else "extension"
        yield Bonus(step, bonus, text(kept, bonus), p_bonus, kept, kind, **extra("bonus", kept))


def event_from_dict(d: dict[str, Any]) -> Event:
    try:
        cls = EVENT_TYPES[d["type"]]
    except KeyError as e:
        raise ValueError(f"Unknown event type: {d.get('type')!r}") from e
    return cls.from_dict(d)
