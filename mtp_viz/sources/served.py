"""What every server source shares once a stream is read: the tokens as they arrived,
laid out as the engine's event stream (step 1 is the prefill; each later step, the
server's drafted and accepted counts over the tokens it wrote), and the ``done`` event.

A server sends what it decided, not which drafts it rejected: its streams have no
``drafted``/``rejected`` events, ``q`` stays 1.0, and a view shows
``step.draft_tokens - step.accepted`` as a count of rejected drafts.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterator, Sequence

from mtp_viz.engine.events import Bonus, Done, Event, Start, Step, verdicts

from .trace import MAX_TRACE_DRAFT  # drafts in one step at most: what a trace of the run may hold

MAX_TOKEN_ID = 2**31 - 1     # a token id is a vocabulary index; anything past this is not one
# A server's prompt ids a run keeps in its start event (the page shows no more; the
# count, prompt_tokens, stays whole): a 650,000-id /tokenize answer held 23.5 MB a run.
PROMPT_IDS_KEPT = 2048


def count_ok(v: Any, high: int) -> bool:
    """A whole number from 0 to ``high`` (a bool is not one)."""
    return isinstance(v, int) and not isinstance(v, bool) and 0 <= v <= high


class Mismatch(ValueError):
    """What the server sent does not agree with itself (ids, logprobs, arrays, tokens)."""


@dataclass(frozen=True)
class Received:
    """One generated token as it arrived."""
    token_id: int
    text: str          # its piece of the text (the pieces concatenate to the server's text)
    p: float           # the target's probability of it (exp of the reported logprob)
    t: float           # seconds from sending the request to its arrival


def start_event(mode: str, prompt_ids: Sequence[int], settings: dict) -> Start:
    """The run's start: all of its prompt's count, at most :data:`PROMPT_IDS_KEPT` of its
    ids (``settings["prompt_ids_kept"]`` says how many)."""
    kept = tuple(prompt_ids[:PROMPT_IDS_KEPT])
    return Start(mode, len(prompt_ids), kept, {**settings, "prompt_ids_kept": len(kept)})


def step_events(tokens: Sequence[Received], accepted: Sequence[int], drafted: Sequence[int],
                finish: str) -> Iterator[Event]:
    """The server's per-step arrays laid over its tokens (step 1 is the prefill).

    ``finish`` is the engine-style stop reason, naming the cut of a last step that
    wrote fewer than ``accepted + 1`` tokens. Raises ValueError when the arrays and the
    tokens do not add up (a server that is not what it claims): arrays that are not
    lists of whole numbers, of different lengths, a step that kept more than it drafted
    or drafted more than :data:`MAX_TRACE_DRAFT`, or more or fewer steps than the tokens fill."""
    if not isinstance(accepted, (list, tuple)) or not isinstance(drafted, (list, tuple)) \
            or len(accepted) != len(drafted) or len(accepted) > len(tokens) \
            or not all(count_ok(d, MAX_TRACE_DRAFT) and count_ok(a, d) for a, d in zip(accepted, drafted)):
        raise Mismatch("per-step arrays are inconsistent")
    if not tokens:
        return
    first = tokens[0]
    yield Bonus(1, first.token_id, first.text, first.p, 0, "extension")
    yield Step(1, 0, 0, 1, next_draft_tokens=drafted[0] if drafted else 0, reason="server",
               t=first.t)
    at = 1
    for i, (n, d) in enumerate(zip(accepted, drafted)):
        new = tokens[at:at + n + 1]
        if not new:
            raise Mismatch("more steps than tokens")
        at += len(new)
        step = i + 2
        # a server names its kept drafts and its own token, not the drafts it rejected
        yield from verdicts(step, [t.token_id for t in new[:n]], min(n, len(new)),
                            new[n].token_id if len(new) > n else None, text=lambda k, _: new[k].text,
                            p=[t.p for t in new], p_bonus=new[-1].p, rejected=(), drafted=d)
        cut = "" if len(new) == n + 1 else (finish if finish in ("eos", "max_new_tokens") else "eos")
        yield Step(step, d, n, len(new), next_draft_tokens=drafted[i + 1] if i + 1 < len(drafted) else 0,
                   reason="server", cut=cut, t=new[-1].t)
    if at != len(tokens):
        raise Mismatch("more tokens than steps")


def laid_out(tokens: Sequence[Received], accepted: Sequence[int], drafted: Sequence[int], finish: str,
             mismatch: Exception) -> tuple[list[Event], tuple[int, int, int]]:
    """:func:`step_events` as a list, with the run's (target forwards, drafted, accepted)
    for its ``done``; ``mismatch`` (the server's sentence) when they do not add up."""
    try:
        built = list(step_events(tokens, accepted, drafted, finish))
    except ValueError:
        raise mismatch from None
    kept = sum(min(e.accepted, e.new_tokens) for e in built if isinstance(e, Step))
    return built, (1 + len(accepted), sum(drafted), kept)


def freeze(v: Any) -> Any:
    """JSON values as events hold them (lists become tuples), so events round-trip."""
    if isinstance(v, list):
        return tuple(freeze(x) for x in v)
    if isinstance(v, dict):
        return {k: freeze(x) for k, x in v.items()}
    return v


def done_event(tokens, steps, seconds, finish, metrics) -> Done:
    forwards, drafted, accepted = steps
    return Done.of((t.token_id for t in tokens), forwards, seconds, text="".join(t.text for t in tokens),
                   drafted=drafted, accepted=accepted, stop_reason=finish or "eos",
                   server_metrics=freeze(metrics or {}))


__all__ = ["MAX_TOKEN_ID", "Mismatch", "PROMPT_IDS_KEPT", "Received", "count_ok", "done_event", "freeze",
           "laid_out", "start_event", "step_events"]
