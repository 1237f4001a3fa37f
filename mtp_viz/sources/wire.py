"""One HTTP request against one deadline, with the standard library's ``http.client``.

A socket timeout bounds one read, not a request: a server that sends a byte just inside
it holds the caller for as long as it likes. Here every wait of a request (connecting,
sending, the status line, the headers, the body or the stream) is a poll of at most
:data:`POLL` seconds, and before each poll a :class:`Clock` says how long the request may
still wait: the caller's deadline (its sentence raised once passed), how long the server
may stay silent (``silence``: ``socket.timeout``), and the run's stop (:class:`Stopped`).
So a stop reaches any wait within :data:`POLL` seconds, and a deadline holds to within
one poll however the bytes are paced.

:func:`request` returns an ``http.client.HTTPResponse`` whose reads go through the same
clock; closing it closes the connection. Nothing else is contacted: no proxy, no redirect
(a 3xx is the HTTP error it is, as is any status of 300 or more).
"""
from __future__ import annotations

import base64
import errno
import http.client
import io
import math
import os
import select
import socket
import ssl
import time
import urllib.error
import urllib.parse
from typing import Callable

POLL = 0.25   # seconds one wait on a socket may take before the clock is asked again


class Stopped(Exception):
    """The run's stop was set while it waited on a server."""


def stop_test(stop) -> Callable[[], bool]:
    """``stop`` (None, a ``threading.Event`` or a callable) as a question."""
    if stop is None:
        return lambda: False
    if callable(stop):
        return stop
    return stop.is_set


def deadline(seconds: float, late: Callable[[], Exception]) -> Callable[[], float]:
    """Seconds left until ``seconds`` from now, on the monotonic clock; past them, ``late()``."""
    end = time.monotonic() + seconds

    def left() -> float:
        now = time.monotonic()
        if now >= end:
            raise late()
        return end - now
    return left


class Clock:
    """How long one request may still wait. ``left``: seconds to its deadline (it raises
    the deadline's error once passed); ``silence``: seconds the server may send nothing
    (then ``socket.timeout``); ``stop``: the run's stop (then :class:`Stopped`)."""

    def __init__(self, left: Callable[[], float], stop=None, silence: float = math.inf):
        self.left, self.stopped, self.silence = left, stop_test(stop), silence
        self.heard = time.monotonic()   # when the server last sent (or the request began)

    def wait(self) -> float:
        """The next poll's timeout (at most :data:`POLL`), or the error that ends the wait."""
        if self.stopped():
            raise Stopped()
        left = self.left()
        quiet = self.silence - (time.monotonic() - self.heard)
        if quiet <= 0:
            raise socket.timeout("timed out")
        return max(0.001, min(POLL, left, quiet))


class _Reader(io.RawIOBase):
    """A socket's bytes, each read polled against the clock; closing it closes the socket."""

    def __init__(self, sock: socket.socket, clock: Clock):
        self.sock, self.clock = sock, clock

    def readable(self) -> bool:
        return True

    def readinto(self, b) -> int:
        while True:
            self.sock.settimeout(self.clock.wait())
            try:
                n = self.sock.recv_into(b)
            except (socket.timeout, ssl.SSLWantReadError, InterruptedError):
                continue
            self.clock.heard = time.monotonic()
            return n

    def close(self) -> None:
        if not self.closed:
            self.sock.close()
        super().close()


class _Socket:
    """What ``http.client`` needs of a socket (send, makefile, close), on the clock."""

    def __init__(self, sock: socket.socket, clock: Clock):
        self.sock, self.clock = sock, clock

    def sendall(self, data) -> None:
        view = memoryview(data if isinstance(data, (bytes, bytearray)) else bytes(data))
        while view:
            self.sock.settimeout(self.clock.wait())
            try:
                view = view[self.sock.send(view):]
            except (socket.timeout, ssl.SSLWantWriteError, InterruptedError):
                continue

    def makefile(self, mode: str = "rb", *args, **kwargs):
        return io.BufferedReader(_Reader(self.sock, self.clock))

    def close(self) -> None:
        pass   # the response's reader owns the socket (http.client closes its side early)


def _ready(sock: socket.socket, clock: Clock, write: bool) -> None:
    """Wait, in polls, until ``sock`` can be written (or read)."""
    while True:
        r, w, _ = select.select([] if write else [sock], [sock] if write else [], [], clock.wait())
        if r or w:
            return


def connect(host: str, port: int, clock: Clock, tls: ssl.SSLContext | None = None) -> socket.socket:
    """A connected (and, with ``tls``, handshaken) socket, every wait on the clock. The
    host name is resolved first, as the system resolves it (that wait is the resolver's)."""
    err: OSError | None = None
    for family, kind, proto, _, addr in socket.getaddrinfo(host, port, type=socket.SOCK_STREAM):
        sock = socket.socket(family, kind, proto)
        try:
            sock.setblocking(False)
            code = sock.connect_ex(addr)
            if code in (errno.EINPROGRESS, errno.EWOULDBLOCK, errno.EAGAIN):
                _ready(sock, clock, write=True)
                code = sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
            if code:
                raise OSError(code, os.strerror(code))   # ConnectionRefusedError, ...
            return _handshake(sock, host, clock, tls) if tls is not None else sock
        except OSError as e:
            sock.close()
            if isinstance(e, socket.timeout):
                raise
            err = e
        except BaseException:
            sock.close()
            raise
    raise err or OSError(f"no address for {host}")


def _handshake(sock: socket.socket, host: str, clock: Clock, tls: ssl.SSLContext) -> socket.socket:
    wrapped = tls.wrap_socket(sock, server_hostname=host, do_handshake_on_connect=False)
    while True:
        try:
            wrapped.do_handshake()
            return wrapped
        except ssl.SSLWantReadError:
            _ready(wrapped, clock, write=False)
        except ssl.SSLWantWriteError:
            _ready(wrapped, clock, write=True)


class _Connection(http.client.HTTPConnection):
    def __init__(self, host: str, port: int, clock: Clock, tls: ssl.SSLContext | None):
        super().__init__(host, port)
        self.clock, self.tls = clock, tls

    def connect(self) -> None:
        self.sock = _Socket(connect(self.host, self.port, self.clock, self.tls), self.clock)


def credentials(parts: urllib.parse.SplitResult) -> dict[str, str]:
    """A URL's userinfo as the Basic ``Authorization`` header it stands for (none without one)."""
    if parts.username is None:
        return {}
    pair = f"{urllib.parse.unquote(parts.username)}:{urllib.parse.unquote(parts.password or '')}"
    return {"Authorization": "Basic " + base64.b64encode(pair.encode()).decode()}


def request(url: str, body: bytes | None, headers: dict[str, str], clock: Clock) -> http.client.HTTPResponse:
    """POST ``body`` to ``url`` (GET without one) and read the status line and headers, all
    on ``clock``. A status of 300 or more raises ``urllib.error.HTTPError`` (its body unread)."""
    parts = urllib.parse.urlsplit(url)
    tls = ssl.create_default_context() if parts.scheme == "https" else None
    port = parts.port or (443 if tls else 80)
    conn = _Connection(parts.hostname or "", port, clock, tls)
    path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    try:
        conn.request("POST" if body is not None else "GET", path, body=body,
                     headers={**headers, **credentials(parts)})
        resp = conn.getresponse()
    except BaseException:
        if conn.sock is not None:
            conn.sock.sock.close()
        raise
    if resp.status >= 300:
        resp.close()
        raise urllib.error.HTTPError(url, resp.status, resp.reason, resp.headers, None)
    return resp


__all__ = ["Clock", "POLL", "Stopped", "connect", "credentials", "deadline", "request", "stop_test"]
