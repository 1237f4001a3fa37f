"""A vLLM server as a source of events: the same stream the local engine yields.

vLLM (started with ``--speculative-config`` and ``--per-request-spec-decode-metrics
detailed``) reports, at the end of each response, two arrays: for verify step i the
drafts it proposed (``per_step_drafted[i]``) and how many the target kept
(``per_step_accepted[i]``). Its tokens split exactly along them: the prefill step
writes one token, then verify step i writes ``accepted[i] + 1`` (the kept drafts and
the target's own token), the last step possibly cut short by EOS or the token limit.
Laying the arrays over the tokens gives, for each step, ``accepted`` events for the
kept drafts, one ``bonus`` (a correction when fewer were kept than drafted, else an
extension) and a ``step`` whose ``draft_tokens``/``accepted`` are the server's numbers.
The server does not say which tokens it rejected, nor the drafter's probabilities: a
vLLM stream has no ``drafted``/``rejected`` events, ``q`` stays 1.0, and a view shows
``step.draft_tokens - step.accepted`` as a count of rejected drafts. ``start.settings``
says what ran (``ran``: :data:`RAN`; and ``backend: "vllm"``, as older traces do).

Requests go to ``/v1/completions`` with the raw prompt (the server's tokenizer adds
BOS as the local engine does), or to ``/v1/chat/completions`` with ``chat=True``, where
the server applies its model's chat template. They stream, with ``return_token_ids``
(the ids), ``logprobs`` (the target's probability of each token, ``p``, and its text
piece, as the server's own tokenizer renders it) and ``include_usage`` (the final
chunk carries the arrays). Timing belongs to the source: each step's ``t`` is when its
last token arrived, counted from the request; the step events themselves can only be
built once the arrays arrive, with the final chunk.

A server without speculation serves as the baseline: ``mode="autoregressive"`` yields
``token`` events as the tokens arrive. Use :func:`generate` (errors become one
``Error`` event) in views and :func:`events` (errors raise ``UserError``) in the CLI.

What a server sends is checked against what was asked, not trusted: more tokens than
``max_new_tokens`` (or more text than they can carry), token ids that are not ids,
log-probabilities that are not one per token, per-step arrays that do not add up to the
tokens, are each one sentence (a :class:`~.client.ServerError`), and the stream is
closed there; no event ever holds more than ``max_new_tokens`` tokens.
"""
from __future__ import annotations

import math
import time
from typing import Any, Iterable, Iterator, Sequence

from mtp_viz.engine.decoding import Sampling
from mtp_viz.engine.events import Error, Event, Ran, Step, Token
from mtp_viz.errors import UserError, clip

from ..http import Stopped, public
from ..served import MAX_TOKEN_ID, Mismatch, Received, count_ok, done_event, laid_out, start_event, step_events
from ..settings import RunSettings
from . import client as vllm_client
from .client import ServerError

__all__ = ["generate", "events", "assemble", "Received", "step_events", "pieces"]

RAN = Ran("vllm", "vLLM server", rejected_ids=False, routing=False)  # what a vLLM run's start says ran
FINISH = {"length": "max_new_tokens", "stop": "eos", "abort": "stopped"}
TEXT_PER_TOKEN = 1024        # characters of text a token may carry (a real one: a few)


def pieces(text: str, tokens: Sequence[str]) -> list[str]:
    """Split a chunk's ``text`` over its tokens, using the server's token strings.

    A token string is used where the text continues with it; one that does not
    (a special token the server left out of the text, a byte fragment shown as
    ``bytes:…``) gets ``""``, and whatever text is left goes to the last token, so the
    pieces always concatenate to exactly ``text``."""
    out, at = [], 0
    for s in tokens:
        ok = bool(s) and text.startswith(s, at)
        out.append(s if ok else "")
        at += len(s) if ok else 0
    if out and at < len(text):
        out[-1] += text[at:]
    return out


def _request(model: str, prompt: str, chat: bool, max_new_tokens: int, temperature: float,
             top_p: float, top_k: int, seed: int | None) -> tuple[str, dict]:
    body: dict[str, Any] = {
        "model": model, "max_tokens": max_new_tokens, "temperature": temperature,
        "top_p": top_p, "top_k": top_k if top_k > 0 else -1, "stream": True,
        "stream_options": {"include_usage": True}, "return_token_ids": True}
    if seed is not None:
        body["seed"] = seed
    if chat:
        body.update(messages=[{"role": "user", "content": prompt}], logprobs=True, top_logprobs=1)
        return "/v1/chat/completions", body
    body.update(prompt=prompt, logprobs=1)
    return "/v1/completions", body


def _ids(choice: dict) -> list[int]:
    """A choice's token ids: a list of vocabulary indices (Mismatch if not)."""
    ids = choice.get("token_ids") or []
    if not isinstance(ids, list) or not all(count_ok(i, MAX_TOKEN_ID) for i in ids):
        raise Mismatch("token ids that are not ids")
    return ids


def _text(choice: dict) -> str:
    """A choice's text: completions' ``text`` or chat's ``delta.content`` (Mismatch if not text)."""
    delta = choice.get("delta") or {}
    if not isinstance(delta, dict):
        raise Mismatch("a delta that is not an object")
    text = choice.get("text") if "text" in choice else delta.get("content")
    if text is not None and not isinstance(text, str):
        raise Mismatch("text that is not text")
    return text or ""


def _received(choice: dict, arrived: float, ids: list[int] | None = None) -> list[Received]:
    """The tokens of one streamed choice: ids, text pieces and the target's probabilities.

    Raises ValueError for text without ids, and :class:`Mismatch` for ids that are not
    ids or logprobs that are not one per id (a number at most 0 each, or null)."""
    ids = _ids(choice) if ids is None else ids
    text = _text(choice)
    if text and not ids:
        raise ValueError("text without token ids")
    lp = choice.get("logprobs") or {}
    if not isinstance(lp, dict):
        raise Mismatch("logprobs that are not an object")
    if "content" in lp:  # chat: a list of {token, logprob}
        content = lp.get("content") or []
        if not isinstance(content, list) or not all(isinstance(c, dict) for c in content):
            raise Mismatch("logprobs that are not a list")
        strings = [c.get("token", "") for c in content]
        logps = [c.get("logprob") for c in content]
    else:                # completions: parallel lists
        strings, logps = lp.get("tokens") or [], lp.get("token_logprobs") or []
    if lp and (not isinstance(strings, list) or not isinstance(logps, list)
               or len(strings) != len(ids) or len(logps) != len(ids)):
        raise Mismatch("logprobs that are not one per token")
    if not lp:
        strings, logps = [""] * len(ids), [None] * len(ids)
    if not all(isinstance(x, str) for x in strings) or not all(
            x is None or (isinstance(x, (int, float)) and not isinstance(x, bool) and not math.isnan(x) and x <= 1e-3)
            for x in logps):
        raise Mismatch("logprobs that are not log-probabilities")
    texts = pieces(text, strings)
    probs = [1.0 if x is None else min(1.0, math.exp(x)) for x in logps]
    return [Received(i, s, p, arrived) for i, s, p in zip(ids, texts, probs)]


def _pick_model(url: str, model: str | None, max_new_tokens: int, stop=None) -> str:
    served = vllm_client.served_models(url, stop)
    if model:
        match = [m for m in served if m["id"] == model]
        if not match:
            raise ServerError(url, f"{{server}} does not serve a model named {clip(repr(model))}; "
                              f"{clip(public(url).rstrip('/'))}/v1/models lists the ones it does.",
                              f"{{server}} does not serve a model named {clip(repr(model))}.")
        entry = match[0]
    else:
        entry = served[0]
    limit = entry.get("max_model_len")
    if isinstance(limit, int) and max_new_tokens >= limit:
        raise UserError(f"{max_new_tokens} new tokens do not fit the server's context of {limit} tokens.")
    return entry["id"]


def events(url: str, prompt: str, *, model: str | None = None, mode: str = "speculative",
           chat: bool = False, max_new_tokens: int = 128, temperature: float = 0.0,
           top_p: float = 1.0, top_k: int = 0, seed: int | None = None,
           stop=None, deadline: float | None = None,
           first_token_deadline: float | None = None) -> Iterator[Event]:
    """Stream one prompt from the server as events; a mistake raises a one-sentence UserError.

    mode: "speculative" (the server must speculate and report per-step arrays) or
    "autoregressive" (any vLLM server, as the baseline). stop: a ``threading.Event``;
    when set the connection is closed and the stream ends with ``done`` (a stopped
    speculative stream has no steps: the server sends them only at the end).
    deadline, first_token_deadline: seconds the request may take in all and until its
    first token (defaults: ``MTP_VIZ_VLLM_DEADLINE``, 300, and
    ``MTP_VIZ_VLLM_FIRST_TOKEN_DEADLINE``, 60); past either the connection is closed
    and the run ends with one sentence, however many keep-alives the server sends."""
    if not isinstance(prompt, str):
        raise UserError("A vLLM server takes a text prompt.")
    # the rules every source's settings follow, each one sentence (sources.settings)
    RunSettings(prompt, (mode,), max_new_tokens=max_new_tokens, chat=chat,
                sampling=Sampling(temperature, top_k, top_p, seed)).validate()
    name = _pick_model(url, model, max_new_tokens, stop)
    counters = vllm_client.scrape(url, name, stop=stop)
    if mode == "speculative" and not counters.enabled:
        raise ServerError(url, "{server} does not speculate; start it with "
                          "--speculative-config, or use it as the baseline.")
    path, body = _request(name, prompt, chat, max_new_tokens, temperature, top_p, top_k, seed)
    settings = {"backend": "vllm", "ran": RAN.as_dict(), "server": public(url), "model": name,
                "api": "chat" if chat else "completions", "max_new_tokens": max_new_tokens,
                "temperature": temperature, "top_p": top_p, "top_k": top_k, "seed": seed,
                "draft_tokens": len(counters.accepted_per_pos), "server_speculates": counters.enabled}
    t0 = time.perf_counter()
    chunks = vllm_client.post_stream(url, path, body, stop=stop, deadline=deadline,
                                     first_token_deadline=first_token_deadline)
    try:
        yield from assemble(chunks, t0, mode, settings, stopped=lambda: stop is not None and stop.is_set())
    finally:
        chunks.close()   # a refused stream hangs up now, not when the generator is collected


def assemble(chunks: Iterable[tuple[float, dict]], t0: float, mode: str, settings: dict,
             stopped=lambda: False) -> Iterator[Event]:
    """Streamed chunks ``(arrival time, parsed JSON)`` → events; no I/O of its own.

    ``t0`` is when the request was sent (arrival times are on the same clock);
    ``settings["server"]`` names the server in error sentences; ``settings["max_new_tokens"]``,
    when given, is the most tokens (and :data:`TEXT_PER_TOKEN` characters each) the
    stream may bring: one more is the server's failure, before any event holds it."""
    url = settings.get("server", "the server")
    limit = settings.get("max_new_tokens")
    limit = limit if count_ok(limit, 2**62) else None
    tokens: list[Received] = []
    finish, metrics, started, last, chars = "", None, False, t0, 0
    unreadable = ServerError(url, "{server} sent a stream mtp-viz cannot read.")
    for arrived, chunk in chunks:
        last = arrived
        choices = chunk.get("choices") or []
        if not isinstance(choices, list) or not all(isinstance(c, dict) for c in choices):
            raise unreadable
        prompt_ids = chunk.get("prompt_token_ids")
        for choice in choices:
            prompt_ids = prompt_ids or choice.get("prompt_token_ids")
            if not started:
                if not isinstance(prompt_ids or [], list) or not all(count_ok(i, MAX_TOKEN_ID)
                                                                      for i in prompt_ids or ()):
                    raise _mismatch(url)
                yield start_event(mode, prompt_ids or (), settings)
                started = True
            try:
                ids = _ids(choice)
                if limit is not None and len(tokens) + len(ids) > limit:
                    raise ServerError(url, f"{{server}} sent more than the {limit} tokens asked for.")
                chars += len(_text(choice))
                if limit is not None and chars > TEXT_PER_TOKEN * limit:
                    raise ServerError(url, f"{{server}} sent more text than the {limit} tokens asked for "
                                      "can carry.")
                new = _received(choice, arrived - t0, ids)
            except Mismatch:
                raise _mismatch(url) from None
            except ValueError:
                raise ServerError(url, "{server} does not return token ids; mtp-viz needs a "
                                  "vLLM that supports return_token_ids.") from None
            for tok in new:
                if mode == "autoregressive":
                    n = len(tokens) + 1
                    yield Token(n, tok.token_id, tok.text, tok.p, tok.t)
                    yield Step(n, 0, 0, 1, t=tok.t)
                tokens.append(tok)
            reason = choice.get("finish_reason")
            finish = FINISH.get(reason, "eos") if isinstance(reason, str) else finish
        if chunk.get("metrics") is not None or chunk.get("usage") is not None:
            metrics = chunk.get("metrics") or {}
            if not isinstance(metrics, dict):
                raise unreadable
    stopped = stopped()
    if not started:
        if stopped:
            return
        raise ServerError(url, "{server} sent no tokens.")
    if stopped:
        finish = "stopped"
    elif not finish:   # no finish_reason: a stream cut before its last chunk, not a run that ended
        n = len(tokens)
        raise ServerError(url, f"{{server}} ended the stream after {n} token{'s' * (n != 1)}, before its last chunk.")
    spec = (metrics or {}).get("speculative_decoding") or {}
    if not isinstance(spec, dict):
        raise _mismatch(url)
    steps = (len(tokens), 0, 0)
    if mode == "speculative" and not stopped:
        acc, dr = spec.get("per_step_accepted"), spec.get("per_step_drafted")
        if spec and not spec.get("num_spec_steps"):
            acc, dr = acc or [], dr or []  # vLLM leaves the arrays out when no step verified drafts
        if acc is None or dr is None:
            if metrics is None:
                raise ServerError(url, "{server} ended the stream without its final usage chunk.")
            raise ServerError(url, "{server} does not report per-step acceptance; start it "
                              "with --per-request-spec-decode-metrics detailed.")
        built, steps = laid_out(tokens, acc, dr, finish,
                                ServerError(url, "{server} reported steps that do not match its tokens."))
        yield from built
    elif mode == "speculative":
        steps = (0, 0, 0)
    yield done_event(tokens, steps, last - t0, finish, metrics)


def _mismatch(url: str) -> ServerError:
    return ServerError(url, "{server} sent token ids or log-probabilities that do not match its tokens.")


def generate(url: str, prompt: str, **kwargs) -> Iterator[Event]:
    """:func:`events` for views: a mistake ends the stream with one ``Error`` event; a stop
    before the stream began ends it with no event."""
    try:
        yield from events(url, prompt, **kwargs)
    except UserError as e:
        yield Error(str(e))
    except Stopped:
        return
