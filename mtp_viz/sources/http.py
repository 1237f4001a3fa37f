"""HTTP to an inference server (vLLM, llama.cpp), with the standard library only.

Only the address the user gave is contacted: proxies from the environment are not
used (a server on 127.0.0.1 must not be sent through one), nor are redirects followed.
Every failure becomes one ``UserError`` sentence that names the URL as the user typed
it and never repeats what the server answered, so a stranger's server cannot put text
in our messages. A failure of the server's is a :class:`ServerError`: its ``str`` is the
operator's sentence (the CLI: the path and the HTTP status where they say what went
wrong), its :meth:`ServerError.visitor` the app's (no HTTP status, no path, the server
named as the app chooses), so a visitor cannot use the app to learn what answers where.

Everything a server sends is bounded: a page at :data:`MAX_PAGE_BYTES`, all of it from
connecting to its last byte within :data:`PAGE_DEADLINE` (:func:`page`); a stream line by
line, each line and the whole body capped by what was asked and each read asking for no
more than is left (:func:`lines`), within a deadline for its first token and one for all
of it, both counted from the request (:class:`Deadlines`). Every wait is a short poll on
one clock (:mod:`.wire`), so a server that paces its bytes cannot stretch a deadline, and
a run's stop ends any wait within a poll (:class:`~.wire.Stopped`). A URL's userinfo
(``http://user:password@host``) is sent as Basic authentication and never shown
(:func:`public`). Each server kind's module (``vllm.client``, ``llamacpp.client``) says
what to ask and how to read it.
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
from typing import Iterable, Iterator

from mtp_viz.errors import UserError, clip

from . import wire
from .wire import Clock, Stopped, deadline

CONNECT_TIMEOUT = 10.0   # seconds a page's server may stay silent (connecting included)
PAGE_DEADLINE = 30.0     # seconds for a whole page, from connecting to its last byte
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
        shown = _shown(url)   # never a URL's userinfo
        super().__init__(_say(sentence, f"the server at {shown}", shown))

    def visitor(self, server: str | None = None, address: str | None = None) -> str:
        """The sentence a visitor sees: ``server`` (default "the server at URL") and
        ``address`` (default the URL) fill the template."""
        shown = _shown(self.url)
        return _say(self.public, server or f"the server at {shown}", address or shown)


def _say(template: str, server: str, address: str) -> str:
    text = template.replace("{server}", server).replace("{url}", address)
    return text[:1].upper() + text[1:] if text.startswith("the ") else text


def public(url: str) -> str:
    """``url`` as it may be shown: without its userinfo (``user:password@``), which
    :func:`open_url` sends as Basic authentication and no sentence, log or page repeats."""
    text = str(url)
    parts = urllib.parse.urlsplit(text)
    if "@" not in parts.netloc:
        return text
    return urllib.parse.urlunsplit(parts._replace(netloc=parts.netloc.rpartition("@")[2]))


def _shown(url: str) -> str:
    return clip(public(url))


def base_url(url: str) -> str:
    """``http://host:port`` from what the user typed (a trailing ``/`` or ``/v1`` is fine)."""
    text = (url or "").strip()
    parts = urllib.parse.urlsplit(text)
    shown = clip(public(text)) if text else "The server URL"
    try:
        parts.port
    except ValueError:   # not a number: perhaps user:password with the @host left out, never shown
        parts, shown = parts._replace(scheme=""), "The server URL"
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise UserError(f"{shown} is not a server address; give one like http://127.0.0.1:8000.")
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
        return ServerError(url, f"{{server}} did not answer within {timeout:g} seconds.")
    if isinstance(reason, socket.gaierror):
        return ServerError(url, "The host name in {url} cannot be resolved.")
    return ServerError(url, f"Cannot reach {{server}} ({type(reason).__name__}).", "Cannot reach {server}.")


def open_url(url: str, path: str, body: dict | None, clock: Clock, software: str = "vLLM"):
    """The response to GET ``path`` (POST ``body``), its status line and headers read on
    ``clock`` (:mod:`.wire`), as its body will be. An HTTP status of 300 or more raises
    ``urllib.error.HTTPError`` (its body unread: it is the server's, and never shown); a
    transport failure is one sentence; the clock's deadline its own, a stop :class:`Stopped`."""
    data = json.dumps(body).encode() if body is not None else None
    headers = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}
    try:
        return wire.request(base_url(url) + path, data, headers, clock)
    except urllib.error.HTTPError:
        raise
    except (OSError, http.client.HTTPException) as e:
        raise explain(url, e, clock.silence, software) from None


def size(n: int) -> str:
    return f"{n // 2**20} MiB" if n % 2**20 == 0 else f"{n} bytes"


def read_page(r) -> bytes:
    """At most MAX_PAGE_BYTES + 1 bytes of a page, each read on the response's clock (whose
    deadline, set before the request, ends a page however its bytes are paced)."""
    data = b""
    while len(data) <= MAX_PAGE_BYTES:
        chunk = r.read1(min(65536, MAX_PAGE_BYTES + 1 - len(data)))
        if not chunk:
            break
        data += chunk
    return data


def page_clock(url: str, path: str, timeout: float = CONNECT_TIMEOUT, stop=None) -> Clock:
    """The clock of one page: :data:`PAGE_DEADLINE` seconds from now to its last byte, the
    server silent at most ``timeout`` seconds at a time."""
    seconds = PAGE_DEADLINE
    late = lambda: ServerError(url, f"{{server}} did not send its {path} within {seconds:g} seconds.",  # noqa: E731
                               f"{{server}} did not answer within {seconds:g} seconds.")
    return Clock(deadline(seconds, late), stop, silence=timeout)


def page(url: str, path: str, body: dict | None = None, timeout: float = CONNECT_TIMEOUT,
         software: str = "vLLM", not_it: str | None = None, stop=None) -> str:
    """GET ``path`` (POST ``body`` when given), at most :data:`MAX_PAGE_BYTES` of it, within
    :data:`PAGE_DEADLINE` seconds in all, from connecting to its last byte. An HTTP error
    says the server is not ``software`` (``not_it``: the visitor's sentence, ``{server}``
    filled in). A set ``stop`` ends the wait with :class:`Stopped`."""
    try:
        with open_url(url, path, body, page_clock(url, path, timeout, stop), software) as r:
            data = read_page(r)
    except urllib.error.HTTPError as e:
        raise ServerError(url, f"{{url}} is not a {software} server: it answers {path} with HTTP {e.code}.",
                          not_it or f"{{server}} is not a {software} server.") from None
    except (OSError, http.client.HTTPException) as e:
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
    """The time limits of one streamed request, on the monotonic clock from when it is
    made: one for its first token (dropped once a token arrived) and one for all of it,
    each covering connecting, the headers and the stream however its bytes are paced.
    ``names``: the environment variables that set the two (for the sentence that says
    how to wait longer). :meth:`clock` is the request's :class:`~.wire.Clock`."""

    def __init__(self, url: str, total: float, first_token: float,
                 names: tuple[str, str] = ("MTP_VIZ_VLLM_FIRST_TOKEN_DEADLINE", "MTP_VIZ_VLLM_DEADLINE")):
        now = time.monotonic()
        self.url, self.total, self.first_token, self.names = url, total, first_token, names
        self.end, self.first_end = now + total, now + first_token
        self.token_seen = False

    def late(self, which: str) -> UserError:
        if which == "first":
            return ServerError(self.url, f"{{server}} sent no token within {self.first_token:g} "
                               f"seconds; {self.names[0]} sets how long to wait.")
        return ServerError(self.url, f"{{server}} did not finish within {self.total:g} seconds; "
                           f"{self.names[1]} sets how long to wait.")

    def left(self) -> float:
        """Seconds to the nearer deadline; raises its sentence once it passed."""
        which, end = (("first", self.first_end) if not self.token_seen and self.first_end < self.end
                      else ("total", self.end))
        now = time.monotonic()
        if now >= end:
            raise self.late(which)
        return end - now

    def clock(self, stop=None, silence: float = READ_TIMEOUT) -> Clock:
        return Clock(self.left, stop, silence)


def lines(resp, url: str, clock: Clock,
          caps: tuple[int, int] = (MAX_LINE_BYTES, 2 * MAX_LINE_BYTES)) -> Iterator[bytes]:
    """The body's lines, each read on ``clock`` (its deadline, its silence and its stop,
    asked before every line too, so a flood of keep-alive comments is cut as a trickle
    is); no line over ``caps[0]`` bytes and no more than ``caps[1]`` in all: each read
    asks for no more than that, so what a flooding server sends past it is never read,
    let alone held."""
    line_cap, body_cap = caps
    left = body_cap
    while True:
        clock.wait()
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
           "ServerError", "Stopped", "base_url", "env_seconds", "explain", "lines", "open_url", "page", "page_clock",
           "public", "read_page", "size", "sse_chunks"]
