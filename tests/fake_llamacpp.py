"""A plain llama.cpp server written with the standard library, for peers: it answers
``/props``, ``/slots`` and ``/tokenize`` as llama-server does, and each ``/completion`` as
its script says (the ids to write, an HTTP error, or a stall that keeps the connection
alive with comments). Every answer is bounded in count and in time, so a test that fails
cannot hang (tests/hostile.py serves it). ``server.completions``: the n_predict of each
completion asked, in order."""
from __future__ import annotations

import json
import threading
import time
from contextlib import contextmanager
from typing import Callable

from hostile import serving

PROPS = {"default_generation_settings": {"params": {}, "n_ctx": 1024}, "build_info": "b0",
         "model_path": "/srv/private/model.gguf", "total_slots": 1}
SLOTS = [{"id": 0, "n_ctx": 1024, "speculative": False}]


def write(ids) -> Callable:
    """An answer: the first n_predict of ``ids``, one chunk each, then the stop chunk."""
    def answer(h, n: int):
        sent = list(ids)[:n]
        _sse_head(h)
        for i, token in enumerate(sent, 1):
            _event(h, {"index": 0, "content": f" w{token}", "tokens": [token], "stop": False,
                       "tokens_predicted": i, "timings": {"predicted_n": i}})
        _event(h, {"stop": True, "stop_type": "limit", "tokens": [], "content": "", "tokens_predicted": len(sent)})
    return answer


def fail(code: int = 500) -> Callable:
    """An answer: HTTP ``code`` with a JSON error."""
    def answer(h, n: int):
        body = json.dumps({"error": {"code": code, "message": "failed", "type": "server_error"}}).encode()
        h.send_response(code)
        h.send_header("Content-Type", "application/json")
        h.send_header("Content-Length", str(len(body)))
        h.end_headers()
        h.wfile.write(body)
    return answer


def stall(ids, seconds: float = 30.0, every: float = 0.1, started: threading.Event | None = None) -> Callable:
    """An answer: the first of ``ids``, then nothing but keep-alive comments every
    ``every`` seconds for ``seconds`` (``started`` set as it begins), then the body ends."""
    def answer(h, n: int):
        _sse_head(h)
        _event(h, {"index": 0, "content": " w", "tokens": [list(ids)[0]], "stop": False, "tokens_predicted": 1,
                   "timings": {"predicted_n": 1}})
        if started is not None:
            started.set()
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            time.sleep(every)
            h.wfile.write(b": ping\n\n")
            h.wfile.flush()
    return answer


@contextmanager
def llama_servers():
    """``start(*answers, shape=None) -> (server, url)``: a plain llama.cpp server whose n-th
    completion is answered by ``answers[n]`` (the last one for every later one), and whose
    ``/v1/models`` says ``shape`` (vocabulary, width) where given; all shut down after."""
    with serving() as serve:
        def start(*answers, shape: tuple[int, int] | None = None):
            completions: list[int] = []
            lock = threading.Lock()

            def completion(h):
                n = json.loads(h.body or b"{}").get("n_predict") or 1
                with lock:
                    completions.append(n)
                    answer = answers[min(len(completions), len(answers)) - 1]
                try:
                    answer(h, n)
                except OSError:
                    pass   # the client hung up (Stop, a deadline)
                h.close_connection = True
            pages = {"/props": json.dumps(PROPS), "/slots": json.dumps(SLOTS),
                     "/tokenize": json.dumps({"tokens": [2, 10, 11, 12]}), "/completion": completion}
            if shape is not None:   # what /v1/models says of the model: (n_vocab, n_embd)
                pages["/v1/models"] = json.dumps({"data": [{"id": "m.gguf", "meta": {"n_vocab": shape[0],
                                                                                     "n_embd": shape[1]}}]})
            server, url = serve(pages)
            server.completions = completions
            return server, url
        yield start


def _sse_head(h) -> None:
    h.send_response(200)
    h.send_header("Content-Type", "text/event-stream")
    h.send_header("Connection", "close")
    h.end_headers()


def _event(h, chunk: dict) -> None:
    h.wfile.write(f"data: {json.dumps(chunk)}\n\n".encode())
    h.wfile.flush()
