"""Small real HTTP servers on 127.0.0.1 that are not the vLLM server a client hopes for:
a plain web server, an OpenAI-compatible server that is not vLLM, a server that
redirects, trickles keep-alive comments or sends absurd metrics. Every answer is
bounded in count and in time, so a test that fails cannot hang."""
from __future__ import annotations

import socket
import threading
import time
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

SECRET = "/srv/private/path-the-server-knows"   # in what the servers say; never in a message
MODELS = {"data": [{"id": "m", "owned_by": "vllm", "max_model_len": 4096}]}
SPEC_METRICS = ('vllm:spec_decode_num_drafts_total{model_name="m"} 3\n'
                'vllm:spec_decode_num_draft_tokens_total{model_name="m"} 12\n'
                'vllm:spec_decode_num_accepted_tokens_total{model_name="m"} 6\n')


@contextmanager
def serving():
    """``start(routes) -> (server, url)`` (:func:`serve`) for a test; every server it
    started is shut down when the block ends (the test files' ``serve`` fixtures)."""
    servers = []

    def start(routes):
        server, url = serve(routes)
        servers.append(server)
        return server, url
    try:
        yield start
    finally:
        for server in servers:
            server.shutdown()
            server.server_close()


def serve(routes):
    """A server answering GET and POST; returns ``(server, url)``; the caller shuts it
    down. ``routes`` maps a path to its answer: a ``str`` body (HTTP 200), a ``(code,
    body)`` pair, or a callable that writes the response itself (given the request
    handler, its POST body in ``body``); ``routes`` may itself be such a callable, answering every path. Any other
    path: 404 with ``SECRET`` in the page. ``server.seen``: the paths asked for, in order."""
    seen: list[str] = []

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def _answer(self):
            seen.append(self.path)
            # a POST's body, for a callable route (``h.body``)
            self.body = self.rfile.read(int(self.headers.get("Content-Length") or 0)) if self.command == "POST" else b""
            route = routes if callable(routes) else routes.get(self.path, (404, f"<h1>not found: {SECRET}</h1>"))
            if callable(route):
                return route(self)
            code, body = route if isinstance(route, tuple) else (200, route)
            reply(code, body)(self)

        do_GET = do_POST = _answer

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    server.seen = seen
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, f"http://127.0.0.1:{server.server_address[1]}"


def reply(code: int, body: str = "", headers=()):
    """An answer for :func:`serve`: ``code``, the ``headers`` (name, value) and ``body``."""
    def answer(h):
        data = body.encode()
        h.send_response(code)
        for k, v in headers:
            h.send_header(k, v)
        h.send_header("Content-Length", str(len(data)))
        h.end_headers()
        h.wfile.write(data)
    return answer


def trickle(first: bytes = b"", ping: bytes = b": ping\n\n", every: float = 0.25, most: int = 60):
    """A completions stream that sends ``first``, then ``ping`` every ``every`` seconds
    and never a token: at most ``most`` times (15 s), then it ends the body."""
    def answer(h):
        h.send_response(200)
        h.send_header("Content-Type", "text/event-stream")
        h.send_header("Connection", "close")
        h.end_headers()
        try:
            h.wfile.write(first)
            h.wfile.flush()
            for _ in range(most):
                time.sleep(every)
                h.wfile.write(ping)
                h.wfile.flush()
        except OSError:
            pass  # the client hung up: what a deadline does
        h.close_connection = True
    return answer


def closed_url() -> str:
    """The URL of a loopback port nothing listens on (a server that is down)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{s.getsockname()[1]}"
