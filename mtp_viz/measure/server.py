"""A vLLM server's timed runs (and a baseline server's), and what they reduce to.

Every prompt goes to the speculating server and, when given, to a baseline server that
serves the same model without speculation; the two alternate (which goes first flips from
prompt to prompt and repeat to repeat) so drift of the machine falls on both alike, after
one untimed warm-up request each. Wall time is the client's, from sending the request to
the last chunk (what a user of the server waits).

Reduced, all from the server's own per-step arrays through :mod:`mtp_viz.analysis.metrics`:
speedup (pooled tokens/s over the baseline's, median over repeats), acceptance
(accepted ÷ drafted), α (per-token acceptance, MLE), τ (tokens per verify step after the
prefill, bonus included, as vLLM's ``mean_acceptance_length``), acceptance per draft
position (conditional and unconditional), and under greedy decoding whether the two
servers wrote the same tokens; the server's ``/metrics`` counters over the run give the
same figures for all the traffic it saw meanwhile, as a check.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Sequence

from mtp_viz.analysis import metrics
from mtp_viz.engine.events import Done
from mtp_viz.errors import UserError
from mtp_viz.prompts import Prompt
from mtp_viz.sources.base import WARM_UP_TOKENS
from mtp_viz.sources.servers import ServerSource
from mtp_viz.sources.settings import RunSettings

from .records import AUTOREGRESSIVE, SPECULATIVE, Record
from .reduce import median, speedup, tps_by_repeat


def one(source: ServerSource, base: RunSettings, prompt: str, mode: str, n: int | None = None) -> tuple[Record, list]:
    """One run of ``mode`` through the servers' source: its record and its events."""
    evs = list(source.events(dataclasses.replace(base, prompt=prompt, modes=(mode,),
                                                 max_new_tokens=n or base.max_new_tokens)))
    done = evs[-1]
    if not isinstance(done, Done):
        raise UserError("A server's stream ended without its last chunk.")
    return Record(mode, done.seconds, done.new_tokens, done.target_forwards, tuple(done.generated_ids)), evs


def warm_up(source: ServerSource, base: RunSettings, prompt: str, modes: Sequence[str]) -> dict[str, list]:
    """One short untimed run of each mode (which also checks that each server answers)."""
    return {mode: one(source, base, prompt, mode, min(base.max_new_tokens, WARM_UP_TOKENS))[1] for mode in modes}


def timed(source: ServerSource, base: RunSettings, prompts: Sequence[Prompt], modes: Sequence[str],
          repeats: int) -> tuple[list[Record], list[tuple[Prompt, list]]]:
    """Every prompt on every mode, ``repeats`` times, the order flipping each time: the
    records, and each speculative run's (prompt, events)."""
    records, streams = [], []
    for r in range(repeats):
        for i, p in enumerate(prompts):
            order = modes if (r * len(prompts) + i) % 2 == 0 else modes[::-1]
            done = {}
            for mode in order:
                rec, evs = one(source, base, p.text, mode)
                done[mode] = dataclasses.replace(rec, prompt_id=p.id, category=p.category, repeat=r)
                if mode == SPECULATIVE:
                    streams.append((p, evs))
            if AUTOREGRESSIVE in done and base.greedy:
                done[SPECULATIVE] = dataclasses.replace(
                    done[SPECULATIVE], same_tokens=done[SPECULATIVE].ids == done[AUTOREGRESSIVE].ids)
            records.extend(done.values())
    return records, streams


def reduce(records: Sequence[Record], streams: Sequence[tuple[Prompt, list]], counters, meta: dict[str, Any]
           ) -> dict[str, Any]:
    """bench.json of a server bench (``counters``: the server's counters over the run,
    :class:`mtp_viz.sources.prometheus.SpecDecodeCounters`), runs included."""
    s = metrics.summarize([e for _, st in streams for e in st])
    same = [r.same_tokens for r in records if r.same_tokens is not None]
    return {
        "meta": meta,
        "speculative": {
            "tokens_per_second": median(list(tps_by_repeat(records, SPECULATIVE).values())),
            "speedup": speedup(records, SPECULATIVE, ""),
            "acceptance_rate": s.acceptance_rate, "alpha": s.alpha,
            "tau": s.tau,   # after the prefill (metrics.Summary.tau)
            "mean_draft_tokens": s.mean_draft_tokens,
            "per_position_conditional": s.per_position_conditional,
            "per_position_unconditional": s.per_position_unconditional,
            "same_tokens_as_baseline": (all(same) if same else None),
            "runs_differing_from_baseline": sum(not x for x in same),
        },
        "baseline": {"tokens_per_second": median(list(tps_by_repeat(records, AUTOREGRESSIVE).values()))},
        "server_counters": {
            "verify_steps": counters.drafts, "drafted": counters.draft_tokens,
            "accepted": counters.accepted_tokens, "acceptance_rate": counters.acceptance_rate,
            "tau": counters.mean_acceptance_length,
            "per_position_unconditional": counters.per_position(False),
            "per_position_conditional": counters.per_position(True)},
        "categories": [{"category": c, "speedup": speedup(records, SPECULATIVE, "", c),
                        "alpha": metrics.alpha_estimate([e for p, st in streams if p.category == c for e in st])}
                       for c in sorted({p.category for p, _ in streams})],
        "runs": [r.as_dict() for r in records],
    }


__all__ = ["one", "reduce", "timed", "warm_up"]
