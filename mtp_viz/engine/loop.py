"""The speculative loop and the autoregressive baseline, as generators of events.

The engine knows nothing about text: it deals in token ids. A ``detok`` object
(anything with ``piece(context_ids, token_id) -> str`` and ``decode(ids) -> str``, and
``pieces(context_ids, token_ids)`` for ``top``; see :mod:`mtp_viz.engine.text`) may be passed
to fill the events' ``text`` fields.

One speculative step, in the notation of :mod:`mtp_viz.engine.sampling`:

    draft   the drafter proposes d_1..d_k from q (k from the schedule)
    verify  one target forward over [x, d_1..d_k] gives p_0..p_k
            (x is the newest token, whose KV the target has not computed yet)
    accept  keep the longest agreeing prefix d_1..d_n, add the target's own token,
            crop the k - n rejected entries from the target's KV cache

Both generators can be suspended between steps (they are plain generators), and
stop cleanly when ``stop`` (a ``threading.Event``) is set. Step mode passes ``pause``,
a callable the speculative loop calls after each draft ("drafted") and after each
verification ("verified"); it returns when the user wants the next phase, and the
time spent in it is taken off the engine's clock, so timings count only the work.
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Sequence

import torch
from transformers import DynamicCache

from .drafters.base import DraftContext, Drafter, Proposal
from .events import Accepted, Bonus, Done, Drafted, Event, Rejected, Start, Step, Token
from .experts import NO_TAP, ExpertTap, moe_shape
from .sampling import Sampler, Sampling, accept
from .schedules import Schedule, make_schedule
from .topk import TopK, no_fields


@dataclass
class Tally:
    """A run's counts, summed step by step into its ``done`` event."""
    forwards: int = 0            # target forwards, the prefill included
    drafter_forwards: int = 0
    drafted: int = 0
    accepted: int = 0            # drafts emitted (an EOS or the token limit may cut a step)
    compile_seconds: float = 0.0  # graphs compiled during the run (compiled engine), off its clock


@dataclass
class Forward:
    """One target forward, reduced to what the loop needs."""
    logits: torch.Tensor                  # [n, V] float32
    hidden: torch.Tensor | None           # [1, n, H] last-layer activations (MTP only)
    shared_kv: dict | None                # layer type -> (K, V), ending with the n new tokens
    compile_seconds: float = 0.0          # compiling its graph (compiled engine), off the clock


@torch.inference_mode()
def target_forward(target, cache, tokens: list[int], want_state: bool, keep: int,
                   compiled: bool = True) -> Forward:
    """Run the target over ``tokens`` appended to ``cache``; keep the last ``keep`` logits.
    A compiled target (:class:`.compiled.FastTarget`) runs its graph for this width
    (``compiled=False``: its twin eagerly, as for a prefill of any length)."""
    if engine_of(target) == "compiled":
        return Forward(*target.forward(cache, tokens, want_state, keep, compiled))
    ids = torch.tensor([tokens], device=target.device)
    extra = {"output_hidden_states": True, "return_shared_kv_states": True} if want_state else {}
    out = target(input_ids=ids, cache=cache, use_cache=True, logits_to_keep=keep, **extra)
    hidden = out.hidden_states[-1][:, -keep:] if want_state else None
    return Forward(out.logits[0, -keep:].float(), hidden, getattr(out, "shared_kv_states", None))


def crop_shared_kv(shared_kv: dict, drop: int) -> dict:
    """Drop the last ``drop`` positions (KV of rejected drafts) from every layer type."""
    if not drop:
        return dict(shared_kv)
    return {t: (k[:, :, :-drop], v[:, :, :-drop]) for t, (k, v) in shared_kv.items()}


def new_cache(target, need: int):
    """(target, cache) for a run of ``need`` positions: a compiled target's static cache,
    or transformers' ``DynamicCache`` (past a compiled target's largest capacity, its eager
    model's: ``engine`` in the start event says which ran)."""
    if engine_of(target) == "compiled":
        cache = target.new_cache(need)
        if cache is not None:
            return target, cache
        target = target.model
    cache = DynamicCache(config=target.config)
    cache.activate_past_recording()  # sliding-window layers can then be rolled back
    return target, cache


def release(target, cache) -> None:
    """A compiled target's cache goes back to its pool when the run ends."""
    if engine_of(target) == "compiled":
        target.release(cache)


def engine_of(target) -> str:
    """"compiled" or "eager": what the start event's ``engine`` says."""
    return getattr(target, "engine", "eager")


def _no_experts_when_compiled(target, experts: bool) -> None:
    if experts and engine_of(target) == "compiled":
        raise ValueError("Counting experts needs the eager engine (its hooks see no compiled graph); "
                         "load the pair without compiling.")


class _Text:
    """Fills ``text`` fields when a detokenizer is given; empty strings otherwise."""

    def __init__(self, detok):
        self.detok = detok

    def piece(self, ctx: Sequence[int], token: int) -> str:
        return self.detok.piece(ctx, token) if self.detok else ""

    def decode(self, ids: Sequence[int]) -> str:
        return self.detok.decode(list(ids)) if self.detok else ""


def speculative(target, drafter: Drafter, prompt_ids: Sequence[int], *, max_new_tokens: int = 64,
                sampling: Sampling = Sampling(), schedule: Schedule | str = "constant",
                draft_tokens: int | None = None, max_draft_tokens: int = 16,
                eos_token_ids: Sequence[int] = (), detok: Any = None, stale_kv: bool = False,
                stop=None, pause=None, top: int = 0, experts: bool = False,
                clock: Callable[[], float] = time.perf_counter) -> Iterator[Event]:
    """Speculative decoding with any drafter; yields the event stream of docs/events.md.

    stale_kv=True leaves the MTP drafter the KV entry computed from the first rejected
    draft, as transformers 5.24 does after a rejection (an experiment switch; past the
    sliding window transformers also keeps every rejected entry in the sliding layers,
    which benchmarks/stale_kv.py reproduces exactly). Cropping it, the default, was
    never worse in that experiment and matches how the bundled drafter was trained.

    top=k > 0 records each position's top-k candidates (:mod:`mtp_viz.engine.topk`); experts=True,
    on a mixture-of-experts target, each step's distinct experts per layer (:mod:`.experts`).
    ``clock`` times everything (seconds); :mod:`mtp_viz.sources.interleave` passes one that
    runs only while this generator does.
    """
    if isinstance(schedule, str):
        schedule = make_schedule(schedule, initial=draft_tokens or drafter.default_draft_tokens,
                                 cap=max_draft_tokens)
    _no_experts_when_compiled(target, experts)
    target, cache = new_cache(target, len(prompt_ids) + max_new_tokens + max_draft_tokens + 1)
    try:
        yield from _speculative(target, cache, drafter, prompt_ids, max_new_tokens, sampling, schedule,
                                eos_token_ids, detok, stale_kv, stop, pause, top, experts, clock)
    finally:
        release(target, cache)


def _speculative(target, cache, drafter, prompt_ids, max_new_tokens, sampling, schedule, eos_token_ids,
                 detok, stale_kv, stop, pause, top, experts, clock) -> Iterator[Event]:
    text, eos = _Text(detok), set(eos_token_ids)
    sampler = Sampler(sampling, device=target.device)
    ids = list(prompt_ids)
    yield Start("speculative", len(ids), tuple(ids), {
        "drafter": drafter.kind, "schedule": schedule.name, "draft_tokens": schedule.initial,
        "max_draft_tokens": schedule.cap, **run_setting(target, max_new_tokens, sampling, clock, experts)})
    tap = ExpertTap(target) if experts else NO_TAP  # no hooks unless asked
    t0 = clock()
    drafter.reset()
    schedule.start()  # resets per-generation state; the prefill step drafts nothing
    want_state = drafter.needs_target_state

    # Step 1 is the prefill: no drafts, the target's first token closes it.
    tap.arm()
    fwd = target_forward(target, cache, ids, want_state, keep=1, compiled=False)
    cache.crop(0)
    proposal, tally = Proposal([]), Tally(forwards=1)
    step, draft_s, pick = 1, 0.0, _picker(sampler)
    tops = TopK(top, sampler, drafter, detok) if top else None
    pick = tops.wrap(pick) if tops else pick
    verify_s = clock() - t0
    routed = tap.take()  # the forward's distinct experts per layer (() unless counted)
    while True:
        # -- accept: decide, cut at EOS / the token limit, emit, crop the cache ----------
        drafts = proposal.tokens
        # greedy needs only the argmax; sampling the processed distributions p_0..p_k
        p = None if sampler.greedy else sampler.probs(fwd.logits)
        argmax = fwd.logits.argmax(-1).tolist() if sampler.greedy else None
        n, nxt = accept(sampler, drafts, proposal.q, p, argmax)
        p_tok = token_probs(fwd.logits, p, drafts, n, nxt)
        new, cut, stop_reason = limit(drafts[:n] + [nxt], eos,
                                      max_new_tokens - (len(ids) - len(prompt_ids)))
        kept = min(n, len(new))  # drafts emitted; below n only when an EOS cut the step
        extra = tops.verdict(ids, fwd.logits, p, drafts, proposal.q, n) if tops else no_fields
        yield from _verdict_events(step, ids, proposal, p_tok, n, new, text, extra)
        ids.extend(new)
        tally.drafted += len(drafts)
        tally.accepted += kept
        # The forward appended 1 + len(drafts) KV entries; the first 1 + n are verified.
        rejected_kv = len(drafts) - n
        cache.crop(-rejected_kv)
        drafter.rollback(len(ids))
        next_k, reason = schedule.update(drafted=len(drafts), accepted=n,
                                         draft_seconds=draft_s, verify_seconds=verify_s)
        if not stop_reason and stop is not None and stop.is_set():
            stop_reason = "stopped"
        yield Step(step, len(drafts), kept, len(new), draft_s, verify_s, next_k, reason, cut,
                   clock() - t0, agreed=n, experts_per_layer=routed)
        if stop_reason:
            break
        t0 += _held(pause, "verified", clock)

        # -- draft --------------------------------------------------------------------
        step += 1
        ctx = DraftContext(ids)
        if want_state:
            drop = max(rejected_kv - 1, 0) if stale_kv else rejected_kv
            ctx.hidden = fwd.hidden[:, n:n + 1]
            ctx.shared_kv = crop_shared_kv(fwd.shared_kv, drop)
        budget = max_new_tokens - (len(ids) - len(prompt_ids)) - 1  # leave room for the bonus
        t = clock()
        proposal = drafter.propose(ctx, min(next_k, budget), pick, schedule.keep_drafting)
        draft_s = clock() - t - proposal.compile_seconds   # a graph compiled now is not drafting
        t0 += proposal.compile_seconds
        tally.compile_seconds += proposal.compile_seconds
        tally.drafter_forwards += proposal.forwards
        q_top = tops.drafted(ids, proposal.tokens) if tops else [{}] * len(proposal.tokens)
        for i, tok in enumerate(proposal.tokens):
            yield Drafted(step, i, tok, text.piece(ids + proposal.tokens[:i], tok), _q(proposal, i),
                          **q_top[i])
        if proposal.tokens:
            t0 += _held(pause, "drafted", clock)

        # -- verify: one target forward over the newest token and all drafts ------------
        fwd, verify_s, routed = timed_forward(target, cache, [ids[-1]] + proposal.tokens, want_state,
                                              len(proposal.tokens) + 1, tap, clock)
        t0 += fwd.compile_seconds
        tally.forwards += 1
        tally.compile_seconds += fwd.compile_seconds

    yield _done(ids, prompt_ids, tally, clock() - t0, stop_reason, text)


def timed_forward(target, cache, tokens: list[int], want_state: bool, keep: int, tap,
                  clock: Callable[[], float]) -> tuple[Forward, float, tuple[int, ...]]:
    """:func:`target_forward`, its seconds on ``clock``, and the distinct experts per layer
    ``tap`` counted in it (() unless counting; counted after the clock stops)."""
    t = clock()
    tap.arm()
    fwd = target_forward(target, cache, tokens, want_state, keep)
    seconds = clock() - t - fwd.compile_seconds  # a graph compiled now is not verifying
    return fwd, seconds, tap.take()


def run_setting(target, max_new_tokens: int, sampling: Sampling, clock, experts: bool) -> dict:
    """The start event's settings both modes share."""
    return {"max_new_tokens": max_new_tokens, **sampling.as_dict(), "clock": clock_basis(clock),
            "experts": experts_setting(target, experts), "engine": engine_of(target)}


def experts_setting(target, counted: bool) -> dict:
    """What ``Start.settings["experts"]`` says of the target: {} for a dense one; for a
    mixture of experts its ``layers``, ``num_experts``, ``top_k`` and whether this run
    ``counted`` the experts its forwards touched."""
    shape = moe_shape(target)
    return {**shape, "counted": bool(counted)} if shape else {}


def clock_basis(clock: Callable[[], float]) -> str:
    """What a clock reads, as recorded in ``Start.settings["clock"]``: "wall" (real
    time), or "cpu" (the generating thread's CPU time; see :mod:`mtp_viz.sources.interleave`)."""
    return getattr(clock, "basis", "wall")  # an OwnClock names its basis; anything else is wall


def _held(pause, phase: str, clock: Callable[[], float]) -> float:
    """Seconds spent in ``pause(phase)``: a step-mode wait, kept off the engine's clock."""
    if pause is None:
        return 0.0
    t = clock()
    pause(phase)
    return clock() - t


def limit(new: list[int], eos: set[int], remaining: int) -> tuple[list[int], str, str]:
    """Keep the step's tokens up to the first EOS; say whether the generation ends.

    The drafter is never asked for more than ``remaining - 1`` drafts, so a step's
    tokens (accepted drafts + the target's own) always fit the budget: only an EOS
    can cut a step short. Returns (kept, cut, stop_reason); cut is "eos" when tokens
    the target had already produced were dropped after an EOS, stop_reason why the
    generation ends here ("" when it goes on)."""
    assert len(new) <= remaining, "the draft budget keeps every step within max_new_tokens"
    for j, tok in enumerate(new):
        if tok in eos:
            return new[:j + 1], ("eos" if j < len(new) - 1 else ""), "eos"
    return new, "", "max_new_tokens" if len(new) == remaining else ""


def token_probs(logits: torch.Tensor, p: torch.Tensor | None, drafts: list[int], n: int,
                nxt: int) -> list[float]:
    """The target's probability of each draft and of its own next token, in one gather.

    Greedy runs never build p: p_i(x) = exp(logit_i(x) - logsumexp_i) is the same number."""
    rows = torch.tensor(list(range(len(drafts))) + [n], device=logits.device)
    cols = torch.tensor(drafts + [nxt], device=logits.device)
    if p is not None:
        return p[rows, cols].tolist()
    return (logits[rows, cols] - logits.logsumexp(-1)[rows]).exp().tolist()


def _picker(sampler: Sampler):
    def pick(logits: torch.Tensor) -> tuple[int, float, torch.Tensor | None]:
        if sampler.greedy:  # q of the argmax only: exp(max - logsumexp), one sync
            top, lse = logits.float().max(-1), logits.float().logsumexp(-1)
            # float64 holds every token id exactly (integers up to 2**53)
            tok, q_tok = torch.stack([top.indices.double(), (top.values - lse).exp().double()]).tolist()
            return int(tok), q_tok, None
        q = sampler.probs(logits[None])[0]
        tok = sampler.pick(q)
        return tok, float(q[tok]), q
    return pick


def _q(proposal: Proposal, i: int) -> float:
    return proposal.q_tokens[i] if proposal.q_tokens is not None else 1.0


def _verdict_events(step, ids, proposal, p_tok, n, new, text, extra=no_fields) -> Iterator[Event]:
    """accepted (kept drafts), rejected (from the first disagreement on), bonus;
    ``extra(kind, index)`` gives each event's recorded top candidates."""
    drafts = proposal.tokens
    kept = min(n, len(new))
    ctx = list(ids)
    for i in range(kept):
        yield Accepted(step, i, drafts[i], text.piece(ctx, drafts[i]), p_tok[i], _q(proposal, i),
                       **extra("accepted", i))
        ctx.append(drafts[i])
    for i in range(n, len(drafts)):
        yield Rejected(step, i, drafts[i], text.piece(ids + drafts[:i], drafts[i]), p_tok[i],
                       _q(proposal, i), **extra("rejected", i))
    if len(new) > n:
        tok = new[n]
        kind = "correction" if n < len(drafts) else "extension"
        yield Bonus(step, tok, text.piece(ctx, tok), p_tok[-1], n, kind, **extra("bonus", n))


def _done(ids, prompt_ids, tally: Tally, seconds, stop_reason, text) -> Done:
    gen = ids[len(prompt_ids):]
    drafted, accepted, forwards = tally.drafted, tally.accepted, tally.forwards
    return Done(len(gen), forwards, seconds, text.decode(gen), tally.drafter_forwards,
                drafted, accepted, accepted / drafted if drafted else 0.0,
                len(gen) / forwards if forwards else 0.0,
                len(gen) / seconds if seconds > 0 else 0.0, stop_reason, tuple(gen),
                compile_seconds=tally.compile_seconds)


def autoregressive(target, prompt_ids: Sequence[int], *, max_new_tokens: int = 64,
                   sampling: Sampling = Sampling(), eos_token_ids: Sequence[int] = (),
                   detok: Any = None, stop=None, top: int = 0, experts: bool = False,
                   clock: Callable[[], float] = time.perf_counter) -> Iterator[Event]:
    """Plain decoding, one target forward per token, through the same event types
    (top=k > 0: each token's event also carries the target's top-k candidates;
    experts=True: each step its distinct experts per layer, as :func:`speculative`)."""
    _no_experts_when_compiled(target, experts)
    target, cache = new_cache(target, len(prompt_ids) + max_new_tokens + 1)
    try:
        yield from _autoregressive(target, cache, prompt_ids, max_new_tokens, sampling, eos_token_ids, detok,
                                   stop, top, experts, clock)
    finally:
        release(target, cache)


def _autoregressive(target, cache, prompt_ids, max_new_tokens, sampling, eos_token_ids, detok, stop, top,
                    experts, clock) -> Iterator[Event]:
    text, eos = _Text(detok), set(eos_token_ids)
    sampler = Sampler(sampling, device=target.device)
    tops = TopK(top, sampler, detok=detok) if top else None
    ids = list(prompt_ids)
    yield Start("autoregressive", len(ids), tuple(ids), run_setting(target, max_new_tokens, sampling, clock, experts))
    tap = ExpertTap(target) if experts else NO_TAP
    t0 = clock()
    feed, stop_reason, step, tally = ids, "", 0, Tally()
    while not stop_reason:
        step += 1
        t = clock()
        tap.arm()
        fwd = target_forward(target, cache, feed, False, keep=1, compiled=step > 1)  # step 1: the prefill
        t0 += fwd.compile_seconds
        tally.compile_seconds += fwd.compile_seconds
        p = None if sampler.greedy else sampler.probs(fwd.logits)
        tok = int(fwd.logits[0].argmax()) if sampler.greedy else sampler.pick(p[0])
        p_tok = token_probs(fwd.logits, p, [], 0, tok)[0]
        verify_s = clock() - t - fwd.compile_seconds  # the plain step: its forward and its pick
        routed = tap.take()
        yield Token(step, tok, text.piece(ids, tok), p_tok, clock() - t0,
                    **(tops.token(ids, fwd.logits, p) if tops else {}))
        ids.append(tok)
        if tok in eos:
            stop_reason = "eos"
        elif len(ids) - len(prompt_ids) >= max_new_tokens:
            stop_reason = "max_new_tokens"
        elif stop is not None and stop.is_set():
            stop_reason = "stopped"
        yield Step(step, 0, 0, 1, 0.0, verify_s, 0, "", "", clock() - t0, experts_per_layer=routed)
        feed = [tok]
    tally.forwards = step
    yield _done(ids, prompt_ids, tally, clock() - t0, stop_reason, text)
