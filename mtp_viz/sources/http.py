"""HTTP to an inference server (vLLM, llama.cpp), with the standard library only.

Only the address the user gave is contacted: proxies from the environment are not
used (a server on 127.0.0.1 must not be sent through one), nor are redirects followed.
Every failure becomes one ``UserError`` sentence that names the URL as the user typed
it and never repeats what the server answered, so a stranger's server cannot put text
in our messages. A failure of the server's is a :class:`ServerError`: its ``str`` is the
operator's sentence (the CLI: the path and the HTTP status where they say what went
wrong), its :meth:`ServerError.visitor` the app's (no HTTP status, no path, the server
named as the app chooses), so a visitor cannot use the app to learn what answers where.

Everything a server sends is bounded: a page at :data:`MAX_PAGE_BYTES`, read within a
deadline (:func:`read_page`); a stream line by line, each line and the whole body capped
by what was asked and each read asking for no more than is left (:func:`lines`), within
a deadline for its first token and one for all of it (:class:`Deadlines`). Each server
kind's module (``vllm.client``, ``llamacpp.client``) says what to ask and how to read it.
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
from typing import Iterable, Iterator

from mtp_viz.errors import UserError, clip

CONNECT_TIMEOUT = 10.0   # seconds for GETs: to connect, and for each read
PAGE_DEADLINE = 30.0     # seconds for a whole GET page, however the server paces its bytes
READ_TIMEOUT = 600.0     # seconds a stream may stay silent (a long prefill on a busy server)
# A real /metrics page is ~100 kB and a model list far less; 4 MiB leaves room for a
# server with many models and engines, and bounds what a hostile one makes us hold.
MAX_PAGE_BYTES = 4 * 1024 * 1024
MAX_LINE_BYTES = 4 * 1024 * 1024   # one server-sent event at most, whatever was asked


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


def explain(url: str, err: BaseException, timeout: float, software: str = "vLLM") -> UserError:
    """A transport failure as one sentence about ``url`` (``software``: what should answer there)."""
    reason = getattr(err, "reason", err)
    if isinstance(reason, (ConnectionRefusedError, ConnectionResetError)):
        return ServerError(url, "No server answers at {url}; start " + software + " there or check the address.")
    if isinstance(reason, (socket.timeout, TimeoutError)):
        return ServerError(url, f"{{server}} did not answer within {timeout:.0f} seconds.")
    if isinstance(reason, socket.gaierror):
        return ServerError(url, "The host name in {url} cannot be resolved.")
    return ServerError(url, f"Cannot reach {{server}} ({type(reason).__name__}).", "Cannot reach {server}.")


def open_url(url: str, path: str, body: dict | None, timeout: float, software: str = "vLLM"):
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
        raise explain(url, e, timeout, software) from None


def size(n: int) -> str:
    return f"{n // 2**20} MiB" if n % 2**20 == 0 else f"{n} bytes"


def read_page(r, url: str, path: str, timeout: float, seconds: float) -> bytes:
    """At most MAX_PAGE_BYTES + 1 bytes of a page, all within ``seconds``: a server that
    trickles a byte just inside each read's ``timeout`` is cut at that deadline (each
    read may wait the smaller of the two: its timeout, or what is left)."""
    deadline, sock, data = time.monotonic() + seconds, socket_of(r), b""
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


def page(url: str, path: str, body: dict | None = None, timeout: float = CONNECT_TIMEOUT,
         software: str = "vLLM", not_it: str | None = None) -> str:
    """GET ``path`` (POST ``body`` when given), at most :data:`MAX_PAGE_BYTES` of it, within
    :data:`PAGE_DEADLINE` seconds in all. An HTTP error says the server is not
    ``software`` (``not_it``: the visitor's sentence, ``{server}`` filled in)."""
    try:
        with open_url(url, path, body, timeout, software) as r:
            data = read_page(r, url, path, timeout, max(timeout, PAGE_DEADLINE))
    except urllib.error.HTTPError as e:
        raise ServerError(url, f"{{url}} is not a {software} server: it answers {path} with HTTP {e.code}.",
                          not_it or f"{{server}} is not a {software} server.") from None
    except (socket.timeout, TimeoutError) as e:
        raise explain(url, e, timeout, software) from None
    if len(data) > MAX_PAGE_BYTES:
        raise ServerError(url, f"{{server}} sent more than {size(MAX_PAGE_BYTES)} for {path}, "
                          "more than mtp-viz reads.",
                          f"{{server}} sent more than {size(MAX_PAGE_BYTES)}, more than mtp-viz reads.")
    return data.decode("utf-8", "replace")


def env_seconds(name: str, default: float) -> float:
    """Seconds from the environment variable ``name``: a positive finite number, or else
    (unset, not a number, 0, negative, inf) ``default``."""
    try:
        value = float(os.environ.get(name, ""))
    except ValueError:
        return default
    return value if math.isfinite(value) and value > 0 else default


class Deadlines:
    """The time limits of one streamed request, on ``time.perf_counter()``: one for its
    first token (dropped once a token arrived) and one for all of it. Each read may
    wait only until the nearer one, so neither a silent server nor one that keeps the
    connection alive with comments holds a run past them. ``names``: the environment
    variables that set the two (for the sentence that says how to wait longer)."""

    def __init__(self, url: str, read_timeout: float, total: float, first_token: float,
                 names: tuple[str, str] = ("MTP_VIZ_VLLM_FIRST_TOKEN_DEADLINE", "MTP_VIZ_VLLM_DEADLINE")):
        now = time.perf_counter()
        self.url, self.read_timeout, self.total, self.first_token = url, read_timeout, total, first_token
        self.names = names
        self.end, self.first_end = now + total, now + first_token
        self.token_seen = False
        self.bound = "read"   # what limited the last wait: "read", "first" or "total"

    def late(self, which: str) -> UserError:
        if which == "first":
            return ServerError(self.url, f"{{server}} sent no token within {self.first_token:g} "
                               f"seconds; {self.names[0]} sets how long to wait.")
        return ServerError(self.url, f"{{server}} did not finish within {self.total:g} seconds; "
                           f"{self.names[1]} sets how long to wait.")

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
        return explain(self.url, err, self.read_timeout) if self.bound == "read" else self.late(self.bound)


def socket_of(resp):
    """The response's socket, to give each read its own timeout. http.client keeps it
    only privately (``fp.raw._sock``); without it the deadlines are still checked
    between lines, which is what stops a server that trickles keep-alive comments."""
    return getattr(getattr(getattr(resp, "fp", None), "raw", None), "_sock", None)


def lines(resp, url: str, deadlines: Deadlines, stop=None,
           caps: tuple[int, int] = (MAX_LINE_BYTES, 2 * MAX_LINE_BYTES)) -> Iterator[bytes]:
    """The body's lines, each read within the deadlines; no line over ``caps[0]`` bytes
    and no more than ``caps[1]`` in all: each read asks for no more than that, so what a
    flooding server sends past it is never read, let alone held. Ends early when
    ``stop`` is set (keep-alive comments yield no chunk to check it on)."""
    sock = socket_of(resp)
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
            raise ServerError(url, f"{{server}} sent a stream line over {size(line_cap)} for "
                              "the tokens asked, more than mtp-viz reads.")
        left -= len(line)
        if left < 0:
            raise ServerError(url, f"{{server}} sent more than {size(body_cap)} for the tokens asked, "
                              "more than mtp-viz reads.")
        yield line


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


__all__ = ["CONNECT_TIMEOUT", "Deadlines", "MAX_LINE_BYTES", "MAX_PAGE_BYTES", "PAGE_DEADLINE", "READ_TIMEOUT",
           "ServerError", "base_url", "env_seconds", "explain", "lines", "open_url", "page", "read_page", "size",
           "socket_of", "sse_chunks"]
