"""HTTP to a vLLM server, with the standard library only: JSON GETs, a streamed POST
(server-sent events) and the ``/metrics`` scrape.

Only the address the user gave is contacted: proxies from the environment are not
used (a server on 127.0.0.1 must not be sent through one), nor are redirects followed.
Every failure becomes one ``UserError`` sentence that names the URL as the user typed
it and never repeats what the server answered, so a stranger's server cannot put text
in our messages. A failure of the server's is a :class:`ServerError`: its ``str`` is the
operator's sentence (the CLI: the path and the HTTP status where they say what went
wrong), its :meth:`ServerError.visitor` the app's (no HTTP status, no path, the server
named as the app chooses), so a visitor cannot use the app to learn what answers where.

Everything a server sends is bounded: a page (``/v1/models``, ``/metrics``) at
:data:`MAX_PAGE_BYTES`; a streamed answer by what was asked (:func:`stream_caps`: one
line, and the whole body, in proportion to the new tokens and the prompt, never a line
over :data:`MAX_LINE_BYTES`), each read asking for no more than is left, so a server
that floods is cut before its bytes are held; and a streamed request in time, by a
deadline for its first token and one for the whole request (:func:`post_stream`;
``MTP_VIZ_VLLM_FIRST_TOKEN_DEADLINE`` and ``MTP_VIZ_VLLM_DEADLINE``). A plain read
timeout is not enough there: every SSE keep-alive comment restarts it.
"""
from __future__ import annotations

import http.client
import json
import math
import os
import socket
import time
import urllib.error
import urllib.parse
import urllib.request
from typing import Any, Iterable, Iterator

from mtp_viz.errors import UserError, clip

from .prometheus import SpecDecodeCounters, parse, spec_decode

__all__ = ["base_url", "get_json", "post_stream", "sse_chunks", "served_models", "scrape", "ServerModel",
           "ServerError", "env_seconds", "stream_caps"]

CONNECT_TIMEOUT = 10.0   # seconds for GETs (models, metrics): to connect, and for each read
PAGE_DEADLINE = 30.0     # seconds for a whole GET page, however the server paces its bytes
READ_TIMEOUT = 600.0     # seconds the stream may stay silent (a long prefill on a busy server)
DEADLINE = 300.0         # seconds one streamed request may take in all (MTP_VIZ_VLLM_DEADLINE)
FIRST_TOKEN_DEADLINE = 60.0   # seconds until its first token (MTP_VIZ_VLLM_FIRST_TOKEN_DEADLINE)
# A real /metrics page is ~100 kB and /v1/models far less; 4 MiB leaves room for a
# server with many models and engines, and bounds what a hostile one makes us hold.
MAX_PAGE_BYTES = 4 * 1024 * 1024
MAX_LINE_BYTES = 4 * 1024 * 1024   # one server-sent event at most, whatever was asked
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


class ServerError(UserError):
    """A server's failure, in two sentences. ``sentence`` and ``public`` are templates:
    ``{server}`` is a noun phrase for the server, ``{url}`` its address. ``str()`` fills
    them with the URL (the operator's sentence, as the CLI prints it); :meth:`visitor`
    fills ``public`` (the same sentence without an HTTP status or a path, unless given)
    with the names the app chooses."""

    def __init__(self, url: str, sentence: str, public: str | None = None):
        self.url, self.public = url, public or sentence
        super().__init__(_say(sentence, f"the server at {clip(url)}", clip(url)))

    def visitor(self, server: str | None = None, address: str | None = None) -> str:
        """The sentence a visitor sees: ``server`` (default "the server at URL") and
        ``address`` (default the URL) fill the template."""
        return _say(self.public, server or f"the server at {clip(self.url)}", address or clip(self.url))


def _say(template: str, server: str, address: str) -> str:
    text = template.replace("{server}", server).replace("{url}", address)
    return text[:1].upper() + text[1:] if text.startswith("the ") else text


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    """A redirect is answered as the HTTP error it is, never followed: only the address
    the user gave (and the app's guard let through) is contacted."""

    def redirect_request(self, req, fp, code, msg, headers, newurl):
        return None


_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}), _NoRedirect)


def base_url(url: str) -> str:
    """``http://host:port`` from what the user typed (a trailing ``/`` or ``/v1`` is fine)."""
    text = (url or "").strip()
    parts = urllib.parse.urlsplit(text)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise UserError(f"{clip(text) if text else 'The server URL'} is not a server address; "
                        "give one like http://127.0.0.1:8000.")
    path = parts.path.rstrip("/")
    if path.endswith("/v1"):
        path = path[:-3]
    return urllib.parse.urlunsplit((parts.scheme, parts.netloc, path, "", ""))


def _explain(url: str, err: BaseException, timeout: float) -> UserError:
    """A transport failure as one sentence about ``url``."""
    reason = getattr(err, "reason", err)
    if isinstance(reason, (ConnectionRefusedError, ConnectionResetError)):
        return ServerError(url, "No server answers at {url}; start vLLM there or check the address.")
    if isinstance(reason, (socket.timeout, TimeoutError)):
        return ServerError(url, f"{{server}} did not answer within {timeout:.0f} seconds.")
    if isinstance(reason, socket.gaierror):
        return ServerError(url, "The host name in {url} cannot be resolved.")
    return ServerError(url, f"Cannot reach {{server}} ({type(reason).__name__}).", "Cannot reach {server}.")


def _open(url: str, path: str, body: dict | None, timeout: float):
    req = urllib.request.Request(base_url(url) + path, method="POST" if body is not None else "GET",
                                 data=json.dumps(body).encode() if body is not None else None,
                                 headers={"Content-Type": "application/json",
                                          "Accept": "application/json, text/event-stream"})
    try:
        return _OPENER.open(req, timeout=timeout)
    except urllib.error.HTTPError as e:
        e.close()  # the body is the server's; it is not shown
        raise
    except (urllib.error.URLError, OSError) as e:
        raise _explain(url, e, timeout) from None


def _size(n: int) -> str:
    return f"{n // 2**20} MiB" if n % 2**20 == 0 else f"{n} bytes"


def _read_page(r, url: str, path: str, timeout: float, seconds: float) -> bytes:
    """At most MAX_PAGE_BYTES + 1 bytes of a page, all within ``seconds``: a server that
    trickles a byte just inside each read's ``timeout`` is cut at that deadline (each
    read may wait the smaller of the two: its timeout, or what is left)."""
    deadline, sock, data = time.monotonic() + seconds, _socket_of(r), b""
    late = ServerError(url, f"{{server}} did not send its {path} within {seconds:.0f} seconds.",
                       f"{{server}} did not answer within {seconds:.0f} seconds.")
    while len(data) <= MAX_PAGE_BYTES:
        left = deadline - time.monotonic()
        if left <= 0:
            raise late
        if sock is not None:
            sock.settimeout(min(timeout, left))
        try:
            chunk = r.read1(min(65536, MAX_PAGE_BYTES + 1 - len(data)))
        except (socket.timeout, TimeoutError):
            if left < timeout:  # the page's deadline, not the read's timeout, ran out
                raise late from None
            raise
        if not chunk:
            break
        data += chunk
    return data


NOT_VLLM = "{server} is not a vLLM server."   # what a visitor learns of a server that is not one


def get_text(url: str, path: str, timeout: float = CONNECT_TIMEOUT) -> str:
    """GET ``path``, at most :data:`MAX_PAGE_BYTES` of it, within :data:`PAGE_DEADLINE`
    seconds in all; a 404 says the server is not what the user thought it was."""
    try:
        with _open(url, path, None, timeout) as r:
            data = _read_page(r, url, path, timeout, max(timeout, PAGE_DEADLINE))
    except urllib.error.HTTPError as e:
        raise ServerError(url, f"{{url}} is not a vLLM server: it answers {path} with HTTP {e.code}.",
                          NOT_VLLM) from None
    except (socket.timeout, TimeoutError) as e:
        raise _explain(url, e, timeout) from None
    if len(data) > MAX_PAGE_BYTES:
        raise ServerError(url, f"{{server}} sent more than {_size(MAX_PAGE_BYTES)} for {path}, "
                          "more than mtp-viz reads.",
                          f"{{server}} sent more than {_size(MAX_PAGE_BYTES)}, more than mtp-viz reads.")
    return data.decode("utf-8", "replace")


def get_json(url: str, path: str, timeout: float = CONNECT_TIMEOUT) -> Any:
    try:
        return json.loads(get_text(url, path, timeout))
    except ValueError:
        raise ServerError(url, f"{{url}} is not a vLLM server: its {path} is not JSON.", NOT_VLLM) from None


class ServerModel(dict):
    """One entry of ``/v1/models``: ``id``, ``owned_by``, ``max_model_len``."""


def served_models(url: str) -> list[ServerModel]:
    """The models a vLLM server serves; one sentence if it is not a vLLM server."""
    data = get_json(url, "/v1/models")
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


def scrape(url: str, model: str | None = None, timeout: float = CONNECT_TIMEOUT) -> SpecDecodeCounters:
    """The server's cumulative spec-decode counters (``enabled=False`` without speculation)."""
    text = get_text(url, "/metrics", timeout)
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


def env_seconds(name: str, default: float) -> float:
    """Seconds from the environment variable ``name``: a positive finite number, or else
    (unset, not a number, 0, negative, inf) ``default``."""
    try:
        value = float(os.environ.get(name, ""))
    except ValueError:
        return default
    return value if math.isfinite(value) and value > 0 else default


class _Deadlines:
    """The time limits of one streamed request, on ``time.perf_counter()``: one for its
    first token (dropped once a token arrived) and one for all of it. Each read may
    wait only until the nearer one, so neither a silent server nor one that keeps the
    connection alive with comments holds a run past them."""

    def __init__(self, url: str, read_timeout: float, total: float, first_token: float):
        now = time.perf_counter()
        self.url, self.read_timeout, self.total, self.first_token = url, read_timeout, total, first_token
        self.end, self.first_end = now + total, now + first_token
        self.token_seen = False
        self.bound = "read"   # what limited the last wait: "read", "first" or "total"

    def late(self, which: str) -> UserError:
        if which == "first":
            return ServerError(self.url, f"{{server}} sent no token within {self.first_token:g} "
                               "seconds; MTP_VIZ_VLLM_FIRST_TOKEN_DEADLINE sets how long to wait.")
        return ServerError(self.url, f"{{server}} did not finish within {self.total:g} seconds; "
                           "MTP_VIZ_VLLM_DEADLINE sets how long to wait.")

    def wait(self) -> float:
        """Seconds the next read may wait; raises the sentence of a deadline that passed."""
        now = time.perf_counter()
        limits = [(self.read_timeout, "read"), (self.end - now, "total")]
        if not self.token_seen:
            limits.append((self.first_end - now, "first"))
        left, self.bound = min(limits)
        if left <= 0:
            raise self.late(self.bound)
        return left

    def timed_out(self, err: BaseException) -> UserError:
        """The sentence for a read that timed out: a deadline's, or the plain timeout's."""
        return _explain(self.url, err, self.read_timeout) if self.bound == "read" else self.late(self.bound)


def _carries_token(chunk: dict) -> bool:
    choices = chunk.get("choices")
    return isinstance(choices, list) and any(
        isinstance(c, dict) and (c.get("token_ids") or c.get("text")) for c in choices)


def _socket_of(resp):
    """The response's socket, to give each read its own timeout. http.client keeps it
    only privately (``fp.raw._sock``); without it the deadlines are still checked
    between lines, which is what stops a server that trickles keep-alive comments."""
    return getattr(getattr(getattr(resp, "fp", None), "raw", None), "_sock", None)


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


def _lines(resp, url: str, deadlines: _Deadlines, stop=None,
           caps: tuple[int, int] = (MAX_LINE_BYTES, 2 * MAX_LINE_BYTES)) -> Iterator[bytes]:
    """The body's lines, each read within the deadlines; no line over ``caps[0]`` bytes
    and no more than ``caps[1]`` in all: each read asks for no more than that, so what a
    flooding server sends past it is never read, let alone held. Ends early when
    ``stop`` is set (keep-alive comments yield no chunk to check it on)."""
    sock = _socket_of(resp)
    line_cap, body_cap = caps
    left = body_cap
    while stop is None or not stop.is_set():
        wait = deadlines.wait()
        if sock is not None:
            sock.settimeout(wait)
        line = resp.readline(min(line_cap, left) + 1)
        if not line:
            return
        if len(line) > line_cap:
            raise ServerError(url, f"{{server}} sent a stream line over {_size(line_cap)} for "
                              "the tokens asked, more than mtp-viz reads.")
        left -= len(line)
        if left < 0:
            raise ServerError(url, f"{{server}} sent more than {_size(body_cap)} for the tokens asked, "
                              "more than mtp-viz reads.")
        yield line


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
    deadlines = _Deadlines(
        url, timeout,
        deadline if deadline is not None else env_seconds("MTP_VIZ_VLLM_DEADLINE", DEADLINE),
        first_token_deadline if first_token_deadline is not None
        else env_seconds("MTP_VIZ_VLLM_FIRST_TOKEN_DEADLINE", FIRST_TOKEN_DEADLINE))
    try:
        resp = _open(url, path, body, deadlines.wait())
    except urllib.error.HTTPError as e:
        raise _http_error(url, path, e.code, body) from None
    except UserError:
        if deadlines.bound != "read" and time.perf_counter() >= min(deadlines.end, deadlines.first_end):
            raise deadlines.late(deadlines.bound) from None   # no answer before a deadline
        raise
    with resp:
        try:
            for chunk in sse_chunks(_lines(resp, url, deadlines, stop, stream_caps(body)), url):
                if stop is not None and stop.is_set():
                    return
                deadlines.token_seen = deadlines.token_seen or _carries_token(chunk)
                yield time.perf_counter(), chunk
        except (socket.timeout, TimeoutError) as e:
            raise deadlines.timed_out(e) from None
        except (ConnectionError, urllib.error.URLError, http.client.HTTPException) as e:
            raise ServerError(url, "{server} closed the connection while generating.") from e


def sse_chunks(lines: Iterable[bytes | str], url: str = "the server") -> Iterator[dict]:
    """Server-sent events (``data: {json}`` lines, blank separators) → parsed chunks,
    up to ``data: [DONE]``. A chunk that is not a JSON object, or an error event, ends
    the stream with one sentence."""
    for raw in lines:
        line = (raw.decode("utf-8", "replace") if isinstance(raw, bytes) else raw).strip()
        if not line.startswith("data:"):
            continue  # blank separators and SSE comments
        data = line[5:].strip()
        if data == "[DONE]":
            return
        try:
            chunk = json.loads(data)
        except (ValueError, RecursionError):   # not JSON, or nested past the parser's depth
            chunk = None
        if not isinstance(chunk, dict):
            raise ServerError(url, "{server} sent a stream mtp-viz cannot read.")
        if "error" in chunk:
            raise ServerError(url, "{server} reported an error while generating.")
        yield chunk


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
