"""Every documented deadline holds against a server that trickles one byte every 0.5 s,
wherever the trickle is (status line, headers, body, a line that never ends), in the
library and the CLI; a stop ends any wait within a second (tests/trickling.py's server).

Before wire.py, a socket timeout per read (10 s for a page, the stream's per line) was
all there was: each of these waits lasted as long as the server kept trickling."""
import json
import threading
import time

import pytest

from mtp_viz.cli.main import main
from mtp_viz.errors import UserError
from mtp_viz.sources import http, open_source
from mtp_viz.sources.llamacpp import client as llama_client
from mtp_viz.sources.settings import RunSettings
from mtp_viz.sources.vllm import client as vllm_client
from mtp_viz.sources.vllm.stream import generate
from trickling import http as answer, pacing, sse, stream_head

PROPS = json.dumps({"default_generation_settings": {"n_ctx": 1024}, "build_info": "b0"})
LLAMA = {"/props": (answer(PROPS), None), "/slots": (answer(json.dumps([{"n_ctx": 1024, "speculative": True}])), None),
         "/tokenize": (answer(json.dumps({"tokens": [2, 10, 11]})), None)}
TOKEN = {"content": "x", "tokens": [5], "stop": False, "tokens_predicted": 1, "timings": {}}


def timed(call):
    t0 = time.monotonic()
    with pytest.raises(UserError) as e:
        call()
    return time.monotonic() - t0, str(e.value)


@pytest.mark.parametrize("where", ["status line", "headers", "body"])
def test_a_trickled_page_ends_at_the_page_deadline(monkeypatch, where):
    monkeypatch.setattr(http, "PAGE_DEADLINE", 2.0)
    page = answer("# " + "x" * 60 + "\n")
    offset = {"status line": 3, "headers": page.index(b"\r\n") + 2, "body": len(page) - 50}[where]
    with pacing({"/metrics": (page, offset)}) as (url, hung_up):
        took, msg = timed(lambda: vllm_client.scrape(url))
    assert 2.0 <= took < 2.0 + 1, took
    assert msg == f"The server at {url} did not send its /metrics within 2 seconds."
    assert hung_up == ["/metrics"] or took < 3   # cut before it was sent whole


def test_a_trickled_props_ends_the_recognition_at_the_page_deadline(monkeypatch):
    monkeypatch.setattr(http, "PAGE_DEADLINE", 2.0)
    page = answer(PROPS)
    with pacing({"/props": (page, 20)}) as (url, _):
        took, msg = timed(lambda: llama_client.recognise(url))
    assert 2.0 <= took < 3, took
    assert "did not send its /props within 2 seconds" in msg


@pytest.mark.parametrize("where", ["status line", "headers", "line"])
def test_a_trickled_completion_ends_at_the_first_token_deadline(monkeypatch, where):
    monkeypatch.setenv("MTP_VIZ_LLAMACPP_FIRST_TOKEN_DEADLINE", "2")
    body = stream_head() + b"data: " + json.dumps(TOKEN).encode() * 20   # a line that never ends
    offset = {"status line": 3, "headers": 20, "line": len(stream_head()) + 5}[where]
    with pacing({**LLAMA, "/completion": (body, offset)}) as (url, _):
        took, msg = timed(lambda: list(open_source(server=url).runs(
            RunSettings("hi", modes=("speculative",), max_new_tokens=4, chat=False))))
    assert 2.0 <= took < 3, took
    assert msg == (f"The server at {url} sent no token within 2 seconds; "
                   "MTP_VIZ_LLAMACPP_FIRST_TOKEN_DEADLINE sets how long to wait.")


def test_a_stream_that_trickles_after_its_first_token_ends_at_the_total_deadline(monkeypatch):
    head = stream_head() + sse({"choices": [{"text": "x", "token_ids": [5]}]})
    body = head + b": " + b"." * 40 + b"\n"        # a comment line, a byte at a time
    with pacing({"/v1/completions": (body, len(head))}) as (url, _):
        from mtp_viz.sources.vllm.client import post_stream
        chunks = post_stream(url, "/v1/completions", {"max_tokens": 4, "prompt": "hi"}, deadline=2.5,
                             first_token_deadline=1)
        took, msg = timed(lambda: list(chunks))
    assert 2.5 <= took < 3.5, took
    assert "did not finish within 2.5 seconds; MTP_VIZ_VLLM_DEADLINE" in msg


def test_the_cli_ends_a_trickled_stream_at_its_deadline_with_one_sentence(monkeypatch, capsys):
    monkeypatch.setenv("MTP_VIZ_LLAMACPP_FIRST_TOKEN_DEADLINE", "2")
    monkeypatch.setenv("MTP_VIZ_LLAMACPP_DEADLINE", "4")
    with pacing({**LLAMA, "/completion": (stream_head() + b"data: {" + b" " * 40, len(stream_head()) + 3)}) as (url, _):
        t0 = time.monotonic()
        code = main(["generate", "--server", url, "--prompt", "hi", "--max-new-tokens", "4", "--no-chat-template"])
        took = time.monotonic() - t0
    err = capsys.readouterr().err
    assert code == 2 and 2.0 <= took < 3, took
    assert err.count("\n") == 1 and "sent no token within 2 seconds" in err and "Traceback" not in err


def test_a_stop_ends_any_wait_within_a_second():
    stop = threading.Event()
    with pacing({**LLAMA, "/props": (answer(PROPS), 5)}) as (url, _):
        threading.Timer(1.0, stop.set).start()
        t0 = time.monotonic()
        events = list(open_source(server=url).runs(RunSettings("hi", modes=("speculative",), max_new_tokens=4,
                                                                chat=False), stop))
        took = time.monotonic() - t0
    assert events == [] and 1.0 <= took < 2.0, took


def test_a_stop_ends_a_vllm_stream_that_trickles_within_a_second():
    stop = threading.Event()
    models = answer(json.dumps({"data": [{"id": "m", "owned_by": "vllm"}]}))
    metrics = answer('vllm:spec_decode_num_drafts_total{model_name="m"} 3\n')
    routes = {"/v1/models": (models, None), "/metrics": (metrics, None),
              "/v1/completions": (stream_head() + b": " + b"." * 60, len(stream_head()))}
    with pacing(routes) as (url, _):
        threading.Timer(1.0, stop.set).start()
        t0 = time.monotonic()
        events = list(generate(url, "hi", max_new_tokens=4, stop=stop))
        took = time.monotonic() - t0
    assert [e.type for e in events] == [] and 1.0 <= took < 2.0, took
