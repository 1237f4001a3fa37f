"""A server on 127.0.0.1 that paces its bytes: each path's answer (status line, headers
and body, as raw bytes) is sent whole, or one byte every ``every`` seconds from a given
offset on. Every answer ends within ``most`` seconds, so a test that fails cannot hang;
``server.hung_up`` counts the answers the client cut before they were sent whole."""
from __future__ import annotations

import json
import socket
import threading
import time
from contextlib import contextmanager


def http(body: bytes | str, headers: dict[str, str] | None = None, code: int = 200) -> bytes:
    """A whole HTTP/1.1 answer (``Content-Length`` set, unless ``headers`` say otherwise)."""
    data = body.encode() if isinstance(body, str) else body
    head = {"Content-Length": str(len(data)), "Connection": "close", **(headers or {})}
    lines = [f"HTTP/1.1 {code} OK"] + [f"{k}: {v}" for k, v in head.items() if v is not None]
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + data


def sse(*chunks: dict | str) -> bytes:
    """A server-sent-event body: one ``data:`` line per chunk (a dict as JSON)."""
    return b"".join(b"data: " + (json.dumps(c) if isinstance(c, dict) else c).encode() + b"\n\n" for c in chunks)


def stream_head() -> bytes:
    return b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\n"


@contextmanager
def pacing(routes: dict[str, tuple[bytes, int]], every: float = 0.5, most: float = 15.0):
    """``routes``: path -> (answer, offset): the bytes before ``offset`` go at once, then one
    byte every ``every`` seconds (offset ``len(answer)``: all at once). Yields the URL."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(16)
    listener.settimeout(0.2)
    hung_up, done = [], threading.Event()

    def answer(conn: socket.socket) -> None:
        with conn:
            conn.settimeout(5)
            request = b""
            while b"\r\n\r\n" not in request:
                got = conn.recv(65536)
                if not got:
                    return
                request += got
            head, _, rest = request.partition(b"\r\n\r\n")
            length = next((int(line.split(b":", 1)[1]) for line in head.split(b"\r\n")
                           if line.lower().startswith(b"content-length:")), 0)
            while len(rest) < length:
                rest += conn.recv(65536)
            path = head.split(b" ")[1].decode()
            data, offset = routes.get(path, (http("not here", code=404), None))
            offset = len(data) if offset is None else offset
            end = time.monotonic() + most
            try:
                conn.sendall(data[:offset])
                for i in range(offset, len(data)):
                    if time.monotonic() > end or done.is_set():
                        return
                    time.sleep(every)
                    conn.sendall(data[i:i + 1])
            except OSError:
                hung_up.append(path)

    def accept() -> None:
        while not done.is_set():
            try:
                conn, _ = listener.accept()
            except OSError:
                continue
            threading.Thread(target=answer, args=(conn,), daemon=True).start()

    threading.Thread(target=accept, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{listener.getsockname()[1]}", hung_up
    finally:
        done.set()
        listener.close()
