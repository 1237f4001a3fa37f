"""HTTP to a vLLM server, with the standard library only: JSON GETs, a streamed POST
(server-sent events) and the ``/metrics`` scrape.

Only the address the user gave is contacted: proxies from the environment are not
used (a server on 127.0.0.1 must not be sent through one), nor are redirects followed.
Every failure becomes one ``UserError`` sentence that names the URL as the user typed
it and never repeats what the server answered, so a stranger's server cannot put text
in our messages.

Everything a server sends is bounded: a page (``/v1/models``, ``/metrics``) at
:data:`MAX_PAGE_BYTES`, one line of a stream at :data:`MAX_LINE_BYTES`, and a streamed
request in time, by a deadline for its first token and one for the whole request
(:func:`post_stream`; ``MTP_VIZ_VLLM_FIRST_TOKEN_DEADLINE`` and ``MTP_VIZ_VLLM_DEADLINE``).
A plain read timeout is not enough there: every SSE keep-alive comment restarts it.
"""
from __future__ import annotations

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
           "env_seconds"]

CONNECT_TIMEOUT = 10.0   # seconds for GETs (models, metrics): to connect, and for each read
PAGE_DEADLINE = 30.0     # seconds for a whole GET page, however the server paces its bytes
READ_TIMEOUT = 600.0     # seconds the stream may stay silent (a long prefill on a busy server)
DEADLINE = 300.0         # seconds one streamed request may take in all (MTP_VIZ_VLLM_DEADLINE)
FIRST_TOKEN_DEADLINE = 60.0   # seconds until its first token (MTP_VIZ_VLLM_FIRST_TOKEN_DEADLINE)
# A real /metrics page is ~100 kB and /v1/models far less; 4 MiB leaves room for a
# server with many models and engines, and bounds what a hostile one makes us hold.
MAX_PAGE_BYTES = 4 * 1024 * 1024
MAX_LINE_BYTES = 4 * 1024 * 1024   # one server-sent event (the last carries the per-step arrays)


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
        return UserError(f"No server answers at {clip(url)}; start vLLM there or check the address.")
    if isinstance(reason, (socket.timeout, TimeoutError)):
        return UserError(f"The server at {clip(url)} did not answer within {timeout:.0f} seconds.")
    if isinstance(reason, socket.gaierror):
        return UserError(f"The host name in {clip(url)} cannot be resolved.")
    return UserError(f"Cannot reach the server at {clip(url)} ({type(reason).__name__}).")


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
    late = UserError(f"The server at {clip(url)} did not send its {path} within {seconds:.0f} seconds.")
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


def get_text(url: str, path: str, timeout: float = CONNECT_TIMEOUT) -> str:
    """GET ``path``, at most :data:`MAX_PAGE_BYTES` of it, within :data:`PAGE_DEADLINE`
    seconds in all; a 404 says the server is not what the user thought it was."""
    try:
        with _open(url, path, None, timeout) as r:
            data = _read_page(r, url, path, timeout, max(timeout, PAGE_DEADLINE))
    except urllib.error.HTTPError as e:
        raise UserError(f"{clip(url)} is not a vLLM server: it answers {path} with HTTP {e.code}.") from None
    except (socket.timeout, TimeoutError) as e:
        raise _explain(url, e, timeout) from None
    if len(data) > MAX_PAGE_BYTES:
        raise UserError(f"The server at {clip(url)} sent more than {_size(MAX_PAGE_BYTES)} for {path}, "
                        "more than mtp-viz reads.")
    return data.decode("utf-8", "replace")


def get_json(url: str, path: str, timeout: float = CONNECT_TIMEOUT) -> Any:
    try:
        return json.loads(get_text(url, path, timeout))
    except ValueError:
        raise UserError(f"{clip(url)} is not a vLLM server: its {path} is not JSON.") from None


class ServerModel(dict):
    """One entry of ``/v1/models``: ``id``, ``owned_by``, ``max_model_len``."""


def served_models(url: str) -> list[ServerModel]:
    """The models a vLLM server serves; one sentence if it is not a vLLM server."""
    data = get_json(url, "/v1/models")
    models = data.get("data") if isinstance(data, dict) else None
    if not isinstance(models, list) or not all(isinstance(m, dict) and "id" in m for m in models):
        raise UserError(f"{clip(url)} is not a vLLM server: its /v1/models lists no models.")
    if not models:
        raise UserError(f"The server at {clip(url)} serves no model.")
    if not any(m.get("owned_by") == "vllm" for m in models):
        raise UserError(f"{clip(url)} is an OpenAI-compatible server but not vLLM; mtp-viz needs "
                        "vLLM's per-request speculative decoding metrics.")
    return [ServerModel(m) for m in models]


def scrape(url: str, model: str | None = None, timeout: float = CONNECT_TIMEOUT) -> SpecDecodeCounters:
    """The server's cumulative spec-decode counters (``enabled=False`` without speculation)."""
    text = get_text(url, "/metrics", timeout)
    try:
        return spec_decode(parse(text), model, who=url)  # absurd numbers: its own UserError
    except ValueError:
        raise UserError(f"{clip(url)} is not a vLLM server: its /metrics is not a Prometheus page.") from None


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
            return UserError(f"The server at {clip(self.url)} sent no token within {self.first_token:g} "
                             "seconds; MTP_VIZ_VLLM_FIRST_TOKEN_DEADLINE sets how long to wait.")
        return UserError(f"The server at {clip(self.url)} did not finish within {self.total:g} seconds; "
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


def _lines(resp, url: str, deadlines: _Deadlines, stop=None) -> Iterator[bytes]:
    """The body's lines, each read within the deadlines, none longer than MAX_LINE_BYTES;
    ends early when ``stop`` is set (keep-alive comments yield no chunk to check it on)."""
    sock = _socket_of(resp)
    while stop is None or not stop.is_set():
        wait = deadlines.wait()
        if sock is not None:
            sock.settimeout(wait)
        line = resp.readline(MAX_LINE_BYTES + 1)
        if not line:
            return
        if len(line) > MAX_LINE_BYTES:
            raise UserError(f"The server at {clip(url)} sent a stream line over {_size(MAX_LINE_BYTES)}, "
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
            for chunk in sse_chunks(_lines(resp, url, deadlines, stop), url):
                if stop is not None and stop.is_set():
                    return
                deadlines.token_seen = deadlines.token_seen or _carries_token(chunk)
                yield time.perf_counter(), chunk
        except (socket.timeout, TimeoutError) as e:
            raise deadlines.timed_out(e) from None
        except (ConnectionError, urllib.error.URLError) as e:
            raise UserError(f"The server at {clip(url)} closed the connection while generating.") from e


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
        except ValueError:
            chunk = None
        if not isinstance(chunk, dict):
            raise UserError(f"The server at {clip(url)} sent a stream mtp-viz cannot read.")
        if "error" in chunk:
            raise UserError(f"The server at {clip(url)} reported an error while generating.")
        yield chunk


def _http_error(url: str, path: str, code: int, body: dict) -> UserError:
    if code == 404:
        return UserError(f"{clip(url)} is not a vLLM server: it has no {path}.")
    if code == 400:
        hint = ("or its model has no chat template (send the raw prompt: --no-chat-template)"
                if path.endswith("chat/completions") else "or a setting is out of range")
        return UserError(f"The server at {clip(url)} rejected the request (HTTP 400): the prompt plus "
                         f"{body.get('max_tokens')} new tokens may not fit its context, {hint}.")
    return UserError(f"The server at {clip(url)} answered HTTP {code} to {path}.")
