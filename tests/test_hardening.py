"""Hardening II: hostile vLLM servers and hostile traces get one sentence, in bounded
time and memory.

The servers are small real HTTP servers on 127.0.0.1, as in test_vllm_errors.py; every
server loop is bounded in count and in time, so a test that fails cannot hang.
"""
import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from mtp_viz.errors import UserError
from mtp_viz.sources.vllm import client, prometheus

SECRET = "/srv/private/path-the-server-knows"
MODELS = {"data": [{"id": "m", "owned_by": "vllm", "max_model_len": 4096}]}
SPEC_METRICS = ('vllm:spec_decode_num_drafts_total{model_name="m"} 3\n'
                'vllm:spec_decode_num_draft_tokens_total{model_name="m"} 12\n'
                'vllm:spec_decode_num_accepted_tokens_total{model_name="m"} 6\n')


def _serve(routes: dict):
    """A server answering GET/POST ``path`` with ``routes[path]``: a ``str`` body, or a
    callable writing the response itself (given the handler)."""
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def _answer(self):
            if self.command == "POST":
                self.rfile.read(int(self.headers.get("Content-Length") or 0))
            route = routes.get(self.path, f"<h1>not found: {SECRET}</h1>")
            if callable(route):
                return route(self)
            data = route.encode()
            self.send_response(200 if self.path in routes else 404)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        do_GET = do_POST = _answer

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, f"http://127.0.0.1:{server.server_address[1]}"


@pytest.fixture
def serve():
    servers = []

    def start(routes):
        server, url = _serve(routes)
        servers.append(server)
        return url
    yield start
    for s in servers:
        s.shutdown()
        s.server_close()


def _sentence(err: UserError) -> str:
    msg = str(err)
    assert "\n" not in msg and SECRET not in msg and "Traceback" not in msg
    assert msg.endswith(".") and len(msg) < 300
    return msg


# ------------------------------------------------------------- 1. /metrics bounds

HUGE_POSITION = ('vllm:spec_decode_num_drafts_total{model_name="m"} 3\n'
                 'vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="m",'
                 'position="1000000"} 1\n')


@pytest.mark.parametrize("page, words", [
    (HUGE_POSITION, "draft positions past 16"),
    (HUGE_POSITION.replace("1000000", "16"), "draft positions past 16"),
    (HUGE_POSITION.replace("1000000", "-1"), "draft positions past 16"),
    (SPEC_METRICS.replace(" 12\n", " NaN\n"), "not a sensible counter"),
    (SPEC_METRICS.replace(" 12\n", " +Inf\n"), "not a sensible counter"),
    (SPEC_METRICS.replace(" 12\n", " 1e308\n"), "not a sensible counter"),
    (SPEC_METRICS.replace(" 12\n", " -5\n"), "not a sensible counter"),
    (SPEC_METRICS + "vllm:generation_tokens_total{model_name=\"m\"} -Inf\n", "not a sensible counter"),
])
def test_metrics_pages_out_of_bounds_are_one_sentence(serve, page, words):
    """A scrape, as the dashboard and the probe make it, and the parser directly."""
    assert len(HUGE_POSITION) < 300
    url = serve({"/metrics": page})
    t0 = time.perf_counter()
    with pytest.raises(UserError) as e:
        client.scrape(url)
    assert time.perf_counter() - t0 < 20
    msg = _sentence(e.value)
    assert words in msg and url in msg and "1000000" not in msg and "1e308" not in msg
    with pytest.raises(UserError) as e:
        prometheus.spec_decode(prometheus.parse(page))
    assert words in _sentence(e.value)


def test_metrics_within_bounds_still_read(serve):
    page = SPEC_METRICS + "".join(
        f'vllm:spec_decode_num_accepted_tokens_per_pos_total{{model_name="m",position="{k}"}} {3 - k % 3}\n'
        for k in range(16)) + 'some_gauge{x="1"} NaN\n'   # other families may be NaN
    counters = client.scrape(serve({"/metrics": page}))
    assert counters.drafts == 3 and len(counters.accepted_per_pos) == 16


def test_a_metrics_page_over_the_size_cap_is_refused(serve, monkeypatch):
    monkeypatch.setattr(client, "MAX_PAGE_BYTES", 1000)
    url = serve({"/metrics": SPEC_METRICS + "# padding\n" * 200})
    with pytest.raises(UserError) as e:
        client.scrape(url)
    assert _sentence(e.value) == f"The server at {url} sent more than 1000 bytes for /metrics, more than mtp-viz reads."
    assert client.MAX_PAGE_BYTES == 1000 and client.scrape(serve({"/metrics": SPEC_METRICS})).drafts == 3


def test_the_default_page_cap_is_4_mib():
    assert client.MAX_PAGE_BYTES == 4 * 1024 * 1024


# ------------------------------------------------------------- 2. stream deadlines

TOKEN_CHUNK = {"prompt_token_ids": [2, 3], "choices": [{
    "index": 0, "text": "x", "token_ids": [5], "finish_reason": None,
    "logprobs": {"tokens": ["x"], "token_logprobs": [-0.1]}}]}


def _trickle(first: bytes = b"", ping: bytes = b": ping\n\n", every: float = 0.25, most: int = 60):
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


def _vllm(serve, stream) -> str:
    return serve({"/v1/models": json.dumps(MODELS), "/metrics": SPEC_METRICS,
                  "/v1/completions": stream})


def _run(url, **kw):
    from mtp_viz.engine.events import Error
    from mtp_viz.sources.vllm.stream import generate
    t0 = time.perf_counter()
    events = list(generate(url, "def f():", max_new_tokens=8, **kw))
    assert time.perf_counter() - t0 < 12, "the deadline did not end the run; the server did"
    assert isinstance(events[-1], Error) and sum(isinstance(e, Error) for e in events) == 1
    msg = events[-1].message
    assert "\n" not in msg and SECRET not in msg and msg.endswith(".")
    return events, msg


def test_keep_alive_comments_do_not_hold_a_run_past_the_first_token_deadline(serve):
    url = _vllm(serve, _trickle())
    events, msg = _run(url, first_token_deadline=1.5)
    assert len(events) == 1
    assert msg == (f"The server at {url} sent no token within 1.5 seconds; "
                   "MTP_VIZ_VLLM_FIRST_TOKEN_DEADLINE sets how long to wait.")


def test_a_silent_server_ends_at_the_first_token_deadline(serve):
    url = _vllm(serve, _trickle(ping=b"", every=0.25, most=60))  # headers, then nothing
    _, msg = _run(url, first_token_deadline=1)
    assert "sent no token within 1 seconds" in msg


def test_a_stream_that_stalls_after_a_token_ends_at_the_total_deadline(serve, monkeypatch):
    monkeypatch.setenv("MTP_VIZ_VLLM_DEADLINE", "2")
    url = _vllm(serve, _trickle(first=b"data: " + json.dumps(TOKEN_CHUNK).encode() + b"\n\n"))
    events, msg = _run(url)
    assert msg == (f"The server at {url} did not finish within 2 seconds; "
                   "MTP_VIZ_VLLM_DEADLINE sets how long to wait.")
    assert events[0].type == "start"


def test_the_first_token_deadline_comes_from_the_environment(serve, monkeypatch):
    monkeypatch.setenv("MTP_VIZ_VLLM_FIRST_TOKEN_DEADLINE", "1")
    monkeypatch.setenv("MTP_VIZ_VLLM_DEADLINE", "not a number")   # falls back to 300
    _, msg = _run(_vllm(serve, _trickle()))
    assert "sent no token within 1 seconds" in msg


@pytest.mark.parametrize("value, seconds", [
    (None, 300.0), ("", 300.0), ("abc", 300.0), ("0", 300.0), ("-5", 300.0), ("inf", 300.0),
    ("nan", 300.0), ("2.5", 2.5), (" 90 ", 90.0)])
def test_deadline_environment_values(monkeypatch, value, seconds):
    if value is None:
        monkeypatch.delenv("MTP_VIZ_VLLM_DEADLINE", raising=False)
    else:
        monkeypatch.setenv("MTP_VIZ_VLLM_DEADLINE", value)
    assert client.env_seconds("MTP_VIZ_VLLM_DEADLINE", client.DEADLINE) == seconds
    assert client.DEADLINE == 300 and client.FIRST_TOKEN_DEADLINE == 60
