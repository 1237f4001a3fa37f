"""One prompt on a llama.cpp server, as the engine's event stream.

The prompt is tokenized by the server itself (``/tokenize``, after its chat template with
``chat``), then sent as ids to a streamed ``/completion`` with ``timings_per_token``:
every token arrives in a chunk of its own carrying the server's running ``draft_n``
(drafts made) and ``draft_n_accepted``. One verification sends its accepted drafts and
its own token one after the other, all with the same running counts, so each rise of
the counts is one step: ``draft_n`` rose by the drafts it verified, ``draft_n_accepted``
by the drafts it kept, and the next ``accepted + 1`` tokens are that step's (fewer
where the token limit or an end of text cut it). A token that arrives with the counts
unchanged is a step without drafts. The rejected drafts' ids are not sent (as with
vLLM): a view shows their count. Each token's probability is the server's where it
sends one (``n_probs``; with MTP llama.cpp sends it for the first token only) and 1.0
elsewhere (docs/llamacpp.md says so).

A chunk that covers more tokens than it names (llama.cpp holds back a token that ends
inside a UTF-8 character and sends it with the next one) loses those tokens' ids and
their steps' place: the run ends with one sentence rather than a guess.
"""
from __future__ import annotations

import math
import time
from typing import Iterator

from mtp_viz.engine.events import Event, Ran, Step, Token
from mtp_viz.errors import UserError

from ..http import ServerError, public
from ..served import MAX_TOKEN_ID, Mismatch, Received, count_ok, done_event, laid_out, start_event
from ..trace import MAX_TRACE_DRAFT
from . import client

RAN = Ran("llamacpp", "llama.cpp server", rejected_ids=False, routing=False)  # what its start says ran
STOPS = {"eos": "eos", "limit": "max_new_tokens", "word": "eos"}
TEXT_PER_TOKEN = 1024
TOP = 1  # n_probs: the server's probability of the token it wrote (and its runner-up)


def events(url: str, prompt: str, *, mode: str = "speculative", chat: bool = False, max_new_tokens: int = 64,
           temperature: float = 0.0, top_p: float = 1.0, top_k: int = 0, seed: int | None = None,
           stop=None) -> Iterator[Event]:
    """Stream one prompt from the llama.cpp server at ``url``; a mistake is one sentence.
    ``mode`` "speculative" needs a server started with a drafter (``--spec-type``);
    "autoregressive" takes any."""
    slots = client.slots(url, stop)
    if mode == "speculative" and not slots.speculative:
        raise ServerError(url, "{server} does not speculate; start llama-server with a drafter "
                          "(-md and --spec-type draft-mtp), or use it as the baseline.")
    text = client.chat_prompt(url, prompt, stop) if chat else prompt
    ids = client.tokenize(url, text, stop)
    if slots.context and len(ids) + max_new_tokens > slots.context:
        raise UserError(f"The prompt ({len(ids)} tokens) plus {max_new_tokens} new tokens do not fit "
                        f"the server's slot of {slots.context} tokens.")
    body = {"prompt": ids, "n_predict": max_new_tokens, "temperature": temperature, "top_p": top_p,
            "top_k": top_k, "min_p": 0.0, "cache_prompt": False, "return_tokens": True, "n_probs": TOP,
            "timings_per_token": True, "stream": True, **({"seed": seed} if seed is not None else {})}
    settings = {"server": public(url), "max_new_tokens": max_new_tokens,
                "temperature": temperature, "top_p": top_p, "top_k": top_k, "seed": seed, "chat": chat,
                "server_speculates": slots.speculative}
    t0 = time.perf_counter()
    chunks = client.post_stream(url, body, stop=stop)
    try:
        yield from assemble(chunks, t0, mode, tuple(ids), settings,
                            stopped=lambda: stop is not None and stop.is_set())
    finally:
        chunks.close()


def _prob(chunk: dict) -> float | None:
    """The server's probability of the chunk's token, where it sends one."""
    probs = chunk.get("completion_probabilities")
    if not isinstance(probs, list) or not probs or not isinstance(probs[0], dict):
        return None
    lp = probs[0].get("logprob")
    if isinstance(lp, (int, float)) and not isinstance(lp, bool) and math.isfinite(lp) and lp <= 1e-3:
        return min(1.0, math.exp(lp))
    return None


def _counts(chunk: dict, url: str) -> tuple[int, int]:
    timings = chunk.get("timings") or {}
    if not isinstance(timings, dict):
        raise Mismatch("timings that are not an object")
    d, a = timings.get("draft_n", 0), timings.get("draft_n_accepted", 0)
    if not count_ok(d, 2**40) or not count_ok(a, d):
        raise Mismatch("draft counts that are not counts")
    return d, a


def assemble(chunks, t0: float, mode: str, prompt_ids: tuple[int, ...], settings: dict,
             stopped=lambda: False) -> Iterator[Event]:
    """Streamed chunks ``(arrival time, parsed JSON)`` → events; no I/O of its own. At most
    ``settings["max_new_tokens"]`` tokens (and :data:`TEXT_PER_TOKEN` characters each)
    are read: one more is the server's failure."""
    url, limit = settings["server"], settings["max_new_tokens"]
    tokens: list[Received] = []
    counts: list[tuple[int, int]] = []   # the running (drafted, accepted) each token came with
    finish, last, ended = "", t0, False
    yield start_event(mode, prompt_ids, {**settings, "backend": "llamacpp", "ran": RAN.as_dict()})
    try:
        for arrived, chunk in chunks:
            last = arrived
            if chunk.get("stop") is True:
                stop_type = chunk.get("stop_type")
                finish = STOPS.get(stop_type, "") if isinstance(stop_type, str) else ""
                ended = True
                continue
            new = chunk.get("tokens")
            if not isinstance(new, list) or len(new) > 1 or not all(count_ok(i, MAX_TOKEN_ID) for i in new):
                raise Mismatch("tokens that are not one id")
            if not new:
                continue
            predicted = chunk.get("tokens_predicted")
            if isinstance(predicted, int) and predicted != len(tokens) + 1:
                raise ServerError(url, "{server} sent several tokens as one piece of text (a character "
                                  "split across tokens), so mtp-viz cannot rebuild this run's steps.")
            text = chunk.get("content")
            if not isinstance(text, str) or len(text) > TEXT_PER_TOKEN:
                raise Mismatch("text that is not a token's")
            if len(tokens) + 1 > limit:
                raise ServerError(url, f"{{server}} sent more than the {limit} tokens asked for.")
            p = _prob(chunk)
            tokens.append(Received(new[0], text, 1.0 if p is None else p, arrived - t0))
            counts.append(_counts(chunk, url))
            if mode == "autoregressive":
                n = len(tokens)
                yield Token(n, new[0], text, tokens[-1].p, tokens[-1].t)
                yield Step(n, 0, 0, 1, t=tokens[-1].t)
    except Mismatch:
        raise ServerError(url, "{server} sent a stream that does not add up.") from None
    if stopped():
        finish, ended = "stopped", True
        if not tokens:   # stopped before the first token: a run that wrote nothing, not a failure
            yield done_event(tokens, (0, 0, 0), last - t0, finish, {})
            return
    if not tokens:
        raise ServerError(url, "{server} sent no tokens.")
    if not ended:   # a stream cut before its last chunk did not end: what it wrote is not a run
        n = len(tokens)
        raise ServerError(url, f"{{server}} ended the stream after {n} token{'s' * (n != 1)}, before its last chunk.")
    steps = (len(tokens), 0, 0)
    if mode == "speculative":
        try:
            per_step = rebuild(counts)
        except Mismatch:
            raise ServerError(url, "{server} sent draft counts that fall or jump between tokens, so mtp-viz "
                              "cannot rebuild this run's steps.") from None
        built, steps = laid_out(tokens, *per_step, finish,
                                ServerError(url, "{server} reported draft counts that do not match its tokens."))
        yield from built
    yield done_event(tokens, steps, last - t0, finish, {})


def rebuild(counts: list[tuple[int, int]]) -> tuple[list[int], list[int]]:
    """Per verification after the prefill: (accepted, drafted), from the running counts
    each token came with (see the module's docstring). Raises :class:`Mismatch` where the
    counts fall, keep more than they drafted, or a step's tokens do not share its counts."""
    accepted, drafted = [], []
    prev, i = counts[0] if counts else (0, 0), 1
    while i < len(counts):
        d, a = counts[i]
        dd, da = d - prev[0], a - prev[1]
        if dd < 0 or da < 0 or da > dd or dd > MAX_TRACE_DRAFT:
            raise Mismatch("running counts that fall")
        take = min(da + 1, len(counts) - i) if dd else 1   # unchanged counts: a step without drafts
        if any(c != (d, a) for c in counts[i:i + take]):
            raise Mismatch("a step's tokens with other counts")
        accepted.append(da)
        drafted.append(dd)
        prev, i = (d, a), i + take
    return accepted, drafted


__all__ = ["RAN", "assemble", "events", "rebuild"]
