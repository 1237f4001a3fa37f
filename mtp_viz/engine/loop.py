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

from .decoder import Forward, RunCache, as_decoder
from .decoding import MAX_DRAFT_TOKENS
from .drafters.base import DraftContext, Drafter, Proposal
from .events import Done, Drafted, Event, Start, Step, Token, verdicts
from .experts import NO_TAP, ExpertTap, moe_shape
from .sampling import Sampler, Sampling, accept, softmax_at
from .schedules import Schedule, make_schedule
from .stopwatch import Stopwatch
from .text import TAIL
from .topk import TopK, no_fields


@dataclass
class Tally:
    """A run's counts, summed step by step into its ``done`` event."""
    forwards: int = 0            # target forwards, the prefill included
    drafter_forwards: int = 0
    drafted: int = 0
    accepted: int = 0            # drafts emitted (an EOS or the token limit may cut a step)


@dataclass(frozen=True)
class Generation:
    """One generation's settings as the loop reads them (both modes)."""
    max_new_tokens: int = 64
    sampling: Sampling = Sampling()
    eos_token_ids: frozenset[int] = frozenset()
    detok: Any = None
    stop: Any = None          # a threading.Event: set, the run ends after its current step
    pause: Any = None         # step mode's hook (speculative only)
    top: int = 0
    experts: bool = False
    stale_kv: bool = False    # speculative only: see :func:`speculative`
    clock: Callable[[], float] = time.perf_counter


def crop_shared_kv(shared_kv: dict, drop: int) -> dict:
    """Drop the last ``drop`` positions (KV of rejected drafts) from every layer type."""
    if not drop:
        return dict(shared_kv)
    return {t: (k[:, :, :-drop], v[:, :, :-drop]) for t, (k, v) in shared_kv.items()}


def _open(target, need: int, experts: bool) -> RunCache:
    """The run's session on ``target``'s decoder (a transformers model decodes eagerly)."""
    decoder = as_decoder(target)
    if experts and not decoder.ran.routing:
        raise ValueError("Counting experts needs the eager engine (its hooks see no compiled graph); "
                         "load the pair without compiling.")
    return decoder.open(need)


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
                draft_tokens: int | None = None, max_draft_tokens: int = MAX_DRAFT_TOKENS,
                eos_token_ids: Sequence[int] = (), detok: Any = None, stale_kv: bool = False,
                stop=None, pause=None, top: int = 0, experts: bool = False,
                clock: Callable[[], float] = time.perf_counter) -> Iterator[Event]:
    """Speculative decoding with any drafter; yields the event stream of docs/events.md.

    ``target`` is a :class:`~mtp_viz.engine.decoder.Decoder` (the compiled engine's) or a
    transformers model (decoded eagerly).

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
    g = Generation(max_new_tokens, sampling, frozenset(eos_token_ids), detok, stop, pause, top, experts,
                   stale_kv, clock)
    with _open(target, speculative_need(len(prompt_ids), max_new_tokens, max_draft_tokens), experts) as kv:
        yield from _speculative(kv, drafter, list(prompt_ids), schedule, g)


def speculative_need(prompt: int, new: int, max_draft_tokens: int = MAX_DRAFT_TOKENS) -> int:
    """The cache positions a speculative run asks of its decoder: the prompt, the new
    tokens, and room for one verification's drafts and its newest token beyond them."""
    return prompt + new + max_draft_tokens + 1


def autoregressive_need(prompt: int, new: int) -> int:
    """The cache positions a plain run asks of its decoder."""
    return prompt + new + 1


def _speculative(kv: RunCache, drafter: Drafter, prompt_ids: list[int], schedule: Schedule,
                 g: Generation) -> Iterator[Event]:
    text, sampler = _Text(g.detok), Sampler(g.sampling, device=kv.decoder.model.device)
    ids = list(prompt_ids)
    yield Start("speculative", len(ids), tuple(ids), {
        "drafter": drafter.kind, "schedule": schedule.name, "draft_tokens": schedule.initial,
        "max_draft_tokens": schedule.cap, **run_setting(kv, g)})
    tap = ExpertTap(kv.decoder.model) if g.experts else NO_TAP  # no hooks unless asked
    watch, tally = Stopwatch(g.clock), Tally(forwards=1)
    drafter.reset()
    schedule.start()  # resets per-generation state; the prefill step drafts nothing
    pick = _picker(sampler)
    tops = TopK(g.top, sampler, drafter, g.detok) if g.top else None
    pick = tops.wrap(pick) if tops else pick
    # Step 1 is the prefill: no drafts, the target's first token closes it.
    proposal, draft_s, step = Proposal([]), 0.0, 1
    fwd, verify_s, routed = _verify(kv, ids, [], drafter.needs_target_state, tap, watch, prefill=True)
    while True:
        # -- accept: decide, cut at EOS / the token limit, emit, crop the cache ----------
        drafts = proposal.tokens
        n, nxt, p = _decide(sampler, fwd, proposal)
        new, cut, stop_reason = limit(drafts[:n] + [nxt], g.eos_token_ids,
                                      g.max_new_tokens - (len(ids) - len(prompt_ids)))
        kept = min(n, len(new))  # drafts emitted; below n only when an EOS cut the step
        extra = tops.verdict(ids, fwd.logits, p, drafts, proposal.q, n) if tops else no_fields
        yield from _verdict_events(step, ids, proposal, token_probs(fwd.logits, p, drafts, n, nxt), n, new, text,
                                   extra)
        ids.extend(new)
        tally.drafted, tally.accepted = tally.drafted + len(drafts), tally.accepted + kept
        kv.crop(len(drafts) - n)  # the forward appended 1 + len(drafts) entries; 1 + n are verified
        drafter.rollback(len(ids))
        next_k, reason = schedule.update(drafted=len(drafts), accepted=n, draft_seconds=draft_s,
                                         verify_seconds=verify_s)
        if not stop_reason and g.stop is not None and g.stop.is_set():
            stop_reason = "stopped"
        yield Step(step, len(drafts), kept, len(new), draft_s, verify_s, next_k, reason, cut,
                   watch.elapsed(), agreed=n, experts_per_layer=routed)
        if stop_reason:
            break
        _hold(g.pause, "verified", watch)

        # -- draft --------------------------------------------------------------------
        step += 1
        budget = g.max_new_tokens - (len(ids) - len(prompt_ids)) - 1  # leave room for the bonus
        proposal, draft_s = _draft(drafter, _context(ids, fwd, n, len(drafts), g.stale_kv, drafter),
                                   min(next_k, budget), pick, schedule, watch)
        tally.drafter_forwards += proposal.forwards
        q_top = tops.drafted(ids, proposal.tokens) if tops else [{}] * len(proposal.tokens)
        tail = ids[-TAIL:]   # a piece reads the context's last TAIL tokens only
        for i, tok in enumerate(proposal.tokens):
            yield Drafted(step, i, tok, text.piece(tail + proposal.tokens[:i], tok), _q(proposal, i), **q_top[i])
        if proposal.tokens:
            _hold(g.pause, "drafted", watch)

        # -- verify: one target forward over the newest token and all drafts ------------
        fwd, verify_s, routed = _verify(kv, [ids[-1]], proposal.tokens, drafter.needs_target_state, tap, watch)
        tally.forwards += 1

    yield _done(ids, prompt_ids, tally, watch, stop_reason, text)


def _decide(sampler: Sampler, fwd: Forward, proposal: Proposal) -> tuple[int, int, torch.Tensor | None]:
    """(drafts accepted, the target's own next token, p_0..p_k or None when greedy):
    greedy needs only the argmax; sampling the processed distributions."""
    p = None if sampler.greedy else sampler.probs(fwd.logits)
    argmax = fwd.logits.argmax(-1).tolist() if sampler.greedy else None
    n, nxt = accept(sampler, proposal.tokens, proposal.q, p, argmax)
    return n, nxt, p


def _context(ids: list[int], fwd: Forward, n: int, drafted: int, stale_kv: bool, drafter: Drafter) -> DraftContext:
    """What the drafter reads after a verification that kept ``n`` of ``drafted`` drafts:
    the target's state at the last kept position and its K/V without the rejected entries."""
    ctx = DraftContext(ids)
    if drafter.needs_target_state:
        rejected = drafted - n
        drop = max(rejected - 1, 0) if stale_kv else rejected
        ctx.hidden = fwd.hidden[:, n:n + 1]
        ctx.shared_kv = crop_shared_kv(fwd.shared_kv, drop)
    return ctx


def _draft(drafter: Drafter, ctx: DraftContext, k: int, pick, schedule: Schedule,
           watch: Stopwatch) -> tuple[Proposal, float]:
    """The drafter's proposal of up to ``k`` tokens and its seconds of drafting."""
    with watch.lap() as lap:
        proposal = drafter.propose(ctx, k, pick, schedule.keep_drafting)
        watch.compiled(proposal.compile_seconds)  # a graph compiled now is not drafting
    return proposal, lap.seconds


def _verify(kv: RunCache, newest: list[int], drafts: list[int], want_state: bool, tap, watch: Stopwatch,
            prefill: bool = False) -> tuple[Forward, float, tuple[int, ...]]:
    """One target forward over ``newest`` and the drafts, its seconds on the engine's
    clock, and the distinct experts per layer ``tap`` counted in it (() unless counting;
    counted after the lap)."""
    with watch.lap() as lap:
        tap.arm()
        fwd = kv.forward(newest + drafts, want_state, keep=1 if prefill else len(drafts) + 1, prefill=prefill)
        watch.compiled(fwd.compile_seconds)  # a graph compiled now is not verifying
        if prefill:
            kv.crop(0)  # trims the sliding layers to what the next forward needs
    return fwd, lap.seconds, tap.take()


def run_setting(kv: RunCache, g: Generation) -> dict:
    """The start event's settings both modes share."""
    return {"max_new_tokens": g.max_new_tokens, **g.sampling.as_dict(), "clock": clock_basis(g.clock),
            "threads": torch.get_num_threads(), "experts": experts_setting(kv.decoder.model, g.experts),
            "engine": kv.engine,
            "ran": kv.decoder.ran.as_dict()}


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


def _hold(pause, phase: str, watch: Stopwatch) -> None:
    """Step mode's wait in ``pause(phase)``, kept off the engine's clock."""
    if pause is not None:
        with watch.held():
            pause(phase)


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
    rows, cols = list(range(len(drafts))) + [n], drafts + [nxt]
    if p is not None:
        return p[torch.tensor(rows, device=p.device), torch.tensor(cols, device=p.device)].tolist()
    return softmax_at(logits, rows, cols)


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
    """The step's verdict (:func:`mtp_viz.engine.events.verdicts`): drafts kept up to the
    first disagreement (or a cut), rejected from it on, then the target's own token."""
    drafts, tail = proposal.tokens, ids[-TAIL:]   # a piece reads the context's last TAIL tokens only
    return verdicts(step, drafts, min(n, len(new)), new[n] if len(new) > n else None,
                    text=lambda i, tok: text.piece(tail + drafts[:i], tok), p=p_tok, p_bonus=p_tok[-1],
                    q=proposal.q_tokens, rejected=range(n, len(drafts)), extra=extra)


def _done(ids, prompt_ids, tally: Tally, watch: Stopwatch, stop_reason, text) -> Done:
    gen = ids[len(prompt_ids):]
    return Done.of(gen, tally.forwards, watch.elapsed(), text=text.decode(gen), drafter_forwards=tally.drafter_forwards,
                   drafted=tally.drafted, accepted=tally.accepted, stop_reason=stop_reason,
                   compile_seconds=watch.compile_seconds)


def autoregressive(target, prompt_ids: Sequence[int], *, max_new_tokens: int = 64,
                   sampling: Sampling = Sampling(), eos_token_ids: Sequence[int] = (),
                   detok: Any = None, stop=None, top: int = 0, experts: bool = False,
                   clock: Callable[[], float] = time.perf_counter) -> Iterator[Event]:
    """Plain decoding, one target forward per token, through the same event types
    (top=k > 0: each token's event also carries the target's top-k candidates;
    experts=True: each step its distinct experts per layer, as :func:`speculative`)."""
    g = Generation(max_new_tokens, sampling, frozenset(eos_token_ids), detok, stop, None, top, experts,
                   clock=clock)
    with _open(target, autoregressive_need(len(prompt_ids), max_new_tokens), experts) as kv:
        yield from _autoregressive(kv, list(prompt_ids), g)


def _autoregressive(kv: RunCache, prompt_ids: list[int], g: Generation) -> Iterator[Event]:
    text, sampler = _Text(g.detok), Sampler(g.sampling, device=kv.decoder.model.device)
    tops = TopK(g.top, sampler, detok=g.detok) if g.top else None
    ids = list(prompt_ids)
    yield Start("autoregressive", len(ids), tuple(ids), run_setting(kv, g))
    tap = ExpertTap(kv.decoder.model) if g.experts else NO_TAP
    watch = Stopwatch(g.clock)
    feed, stop_reason, step, tally = ids, "", 0, Tally()
    while not stop_reason:
        step += 1
        with watch.lap() as lap:  # the plain step: its forward and its pick
            tap.arm()
            fwd = kv.forward(feed, False, keep=1, prefill=step == 1)
            watch.compiled(fwd.compile_seconds)
            p = None if sampler.greedy else sampler.probs(fwd.logits)
            tok = int(fwd.logits[0].argmax()) if sampler.greedy else sampler.pick(p[0])
            p_tok = token_probs(fwd.logits, p, [], 0, tok)[0]
        routed = tap.take()
        yield Token(step, tok, text.piece(ids, tok), p_tok, watch.elapsed(),
                    **(tops.token(ids, fwd.logits, p) if tops else {}))
        ids.append(tok)
        if tok in g.eos_token_ids:
            stop_reason = "eos"
        elif len(ids) - len(prompt_ids) >= g.max_new_tokens:
            stop_reason = "max_new_tokens"
        elif g.stop is not None and g.stop.is_set():
            stop_reason = "stopped"
        yield Step(step, 0, 0, 1, 0.0, lap.seconds, 0, "", "", watch.elapsed(), experts_per_layer=routed)
        feed = [tok]
    tally.forwards = step
    yield _done(ids, prompt_ids, tally, watch, stop_reason, text)
