"""HTTP to a vLLM server: JSON GETs (``/v1/models``), a streamed POST (server-sent
events) and the ``/metrics`` scrape, on :mod:`mtp_viz.sources.http`'s bounded transport.

A streamed answer is capped by what was asked (:func:`stream_caps`: one line, and the
whole body, in proportion to the new tokens and the prompt), and timed by a deadline for
its first token and one for the whole request (:func:`post_stream`;
``MTP_VIZ_VLLM_FIRST_TOKEN_DEADLINE`` and ``MTP_VIZ_VLLM_DEADLINE``). A plain read
timeout is not enough there: every SSE keep-alive comment restarts it.
"""
from __future__ import annotations

import http.client
import json
import socket
import time
import urllib.error
import urllib.parse
import urllib.request
from typing import Any, Iterator

from mtp_viz.errors import UserError

from ..http import (
    CONNECT_TIMEOUT,
    MAX_LINE_BYTES,
    READ_TIMEOUT,
    Deadlines,
    ServerError,
    Stopped,
    base_url,
    env_seconds,
    explain,
    lines,
    open_url,
    page,
    sse_chunks,
)
from ..prometheus import SpecDecodeCounters, parse, spec_decode

__all__ = ["base_url", "get_json", "post_stream", "sse_chunks", "served_models", "scrape", "ServerModel",
           "ServerError", "env_seconds", "stream_caps"]

DEADLINE = 300.0         # seconds one streamed request may take in all (MTP_VIZ_VLLM_DEADLINE)
FIRST_TOKEN_DEADLINE = 60.0   # seconds until its first token (MTP_VIZ_VLLM_FIRST_TOKEN_DEADLINE)
# What one streamed answer may take, from what was asked (stream_caps): a line's envelope
# and the final chunk's metrics, plus each new token's share (its id, text, logprob and
# token string, repeated in top_logprobs and as bytes in chat, escaped: a real token
# takes ~100 bytes; 8 KiB is room for its own chunk too), plus the prompt's ids, which
# the first chunk carries (at most a token per byte of the prompt, each id at most 8
# bytes, and room for a chat template's tokens).
LINE_BASE_BYTES = 64 * 1024
TOKEN_BYTES = 8 * 1024
PROMPT_ID_BYTES = 8
TEMPLATE_TOKENS = 1024


NOT_VLLM = "{server} is not a vLLM server."   # what a visitor learns of a server that is not one


def get_text(url: str, path: str, timeout: float = CONNECT_TIMEOUT, stop=None) -> str:
    """GET ``path`` (:func:`mtp_viz.sources.http.page`); a 404 says the server is not vLLM."""
    return page(url, path, None, timeout, "vLLM", NOT_VLLM, stop)


def get_json(url: str, path: str, timeout: float = CONNECT_TIMEOUT, stop=None) -> Any:
    try:
        return json.loads(get_text(url, path, timeout, stop))
    except ValueError:
        raise ServerError(url, f"{{url}} is not a vLLM server: its {path} is not JSON.", NOT_VLLM) from None


class ServerModel(dict):
    """One entry of ``/v1/models``: ``id``, ``owned_by``, ``max_model_len``."""


def served_models(url: str, stop=None) -> list[ServerModel]:
    """The models a vLLM server serves; one sentence if it is not a vLLM server."""
    data = get_json(url, "/v1/models", stop=stop)
    models = data.get("data") if isinstance(data, dict) else None
    if not isinstance(models, list) or not all(isinstance(m, dict) and "id" in m for m in models):
        raise ServerError(url, "{url} is not a vLLM server: its /v1/models lists no models.", NOT_VLLM)
    if not models:
        raise ServerError(url, "{server} serves no model.")
    if not any(m.get("owned_by") == "vllm" for m in models):
        raise ServerError(url, "{url} is an OpenAI-compatible server but not vLLM; mtp-viz needs "
                          "vLLM's per-request speculative decoding metrics.",
                          "{server} is an OpenAI-compatible server but not vLLM; mtp-viz needs "
                          "vLLM's per-request speculative decoding metrics.")
    return [ServerModel(m) for m in models]


def scrape(url: str, model: str | None = None, timeout: float = CONNECT_TIMEOUT, stop=None) -> SpecDecodeCounters:
    """The server's cumulative spec-decode counters (``enabled=False`` without speculation)."""
    text = get_text(url, "/metrics", timeout, stop)
    try:
        return spec_decode(parse(text), model, who=url)  # absurd numbers: its own sentence
    except ServerError:
        raise
    except UserError as e:
        raise ServerError(url, str(e), "{server} reports speculative decoding counters that are not "
                          "sensible.") from None
    except ValueError:
        raise ServerError(url, "{url} is not a vLLM server: its /metrics is not a Prometheus page.",
                          NOT_VLLM) from None


def _carries_token(chunk: dict) -> bool:
    choices = chunk.get("choices")
    return isinstance(choices, list) and any(
        isinstance(c, dict) and (c.get("token_ids") or c.get("text")) for c in choices)


def stream_caps(body: dict) -> tuple[int, int]:
    """``(line, body)``: the most bytes one line of a streamed answer to ``body``, and the
    whole answer, may take. Both grow with what was asked (``max_tokens`` and the prompt,
    or the chat messages' text): :data:`LINE_BASE_BYTES` + :data:`TOKEN_BYTES` a token +
    :data:`PROMPT_ID_BYTES` a prompt byte (and :data:`TEMPLATE_TOKENS` more); the whole
    answer twice that (each token in a chunk of its own, keep-alive comments), a line
    never over :data:`MAX_LINE_BYTES`. A real answer takes a small part of it."""
    n = body.get("max_tokens")
    n = n if isinstance(n, int) and not isinstance(n, bool) and n > 0 else 1
    text = body.get("prompt")
    if not isinstance(text, str):
        text = "".join(str(m.get("content", "")) for m in body.get("messages") or () if isinstance(m, dict))
    prompt = len(text.encode("utf-8", "replace")) + TEMPLATE_TOKENS
    whole = LINE_BASE_BYTES + TOKEN_BYTES * n + PROMPT_ID_BYTES * prompt
    return min(MAX_LINE_BYTES, whole), 2 * whole


def post_stream(url: str, path: str, body: dict, *, timeout: float = READ_TIMEOUT,
                stop=None, deadline: float | None = None,
                first_token_deadline: float | None = None) -> Iterator[tuple[float, dict]]:
    """POST a streaming request; yield ``(arrival time, chunk)`` for every server-sent event.

    Arrival times are ``time.perf_counter()`` values taken as each event's line is read.
    Ends at ``data: [DONE]``, at the end of the body, or when ``stop`` is set (the
    connection is closed, which makes vLLM abort the request). ``deadline`` (seconds for
    the whole request) and ``first_token_deadline`` (seconds until a chunk carries a
    token) default to ``MTP_VIZ_VLLM_DEADLINE`` (300) and
    ``MTP_VIZ_VLLM_FIRST_TOKEN_DEADLINE`` (60); past either, the run ends with one sentence and the
    connection is closed."""
    deadlines = Deadlines(
        url,
        deadline if deadline is not None else env_seconds("MTP_VIZ_VLLM_DEADLINE", DEADLINE),
        first_token_deadline if first_token_deadline is not None
        else env_seconds("MTP_VIZ_VLLM_FIRST_TOKEN_DEADLINE", FIRST_TOKEN_DEADLINE))
    clock = deadlines.clock(stop, timeout)
    try:
        resp = open_url(url, path, body, clock)
    except urllib.error.HTTPError as e:
        raise _http_error(url, path, e.code, body) from None
    except Stopped:
        return
    with resp:
        try:
            for chunk in sse_chunks(lines(resp, url, clock, stream_caps(body)), url):
                deadlines.token_seen = deadlines.token_seen or _carries_token(chunk)
                yield time.perf_counter(), chunk
        except Stopped:
            return
        except (socket.timeout, TimeoutError) as e:
            raise explain(url, e, timeout) from None
        except (ConnectionError, http.client.HTTPException) as e:
            raise ServerError(url, "{server} closed the connection while generating.") from e

def _http_error(url: str, path: str, code: int, body: dict) -> ServerError:
    if code == 404:
        return ServerError(url, f"{{url}} is not a vLLM server: it has no {path}.", NOT_VLLM)
    if code == 400:
        chat = path.endswith("chat/completions")
        hint = ("or its model has no chat template (send the raw prompt: --no-chat-template)"
                if chat else "or a setting is out of range")
        fit = f"the prompt plus {body.get('max_tokens')} new tokens may not fit its context"
        return ServerError(url, f"{{server}} rejected the request (HTTP 400): {fit}, {hint}.",
                           f"{{server}} rejected the request: {fit}, "
                           + ("or its model has no chat template." if chat else "or a setting is out of range."))
    return ServerError(url, f"{{server}} answered HTTP {code} to {path}.", "{server} refused the request.")
