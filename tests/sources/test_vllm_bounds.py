"""Integrity under load: a vLLM server's answer is bounded by what was asked.

A server that sends more tokens than ``max_new_tokens``, a line far longer than those
tokens can fill, or per-step arrays, token ids or log-probabilities that disagree with
its tokens ends the run with one sentence; no event ever holds more than the tokens
asked for, and what a flooding server sends past the cap is never read. The servers are
small real HTTP servers on 127.0.0.1 (tests/hostile.py) written here, no vLLM and no
mocks; every server loop is bounded, so a test that fails cannot hang.
"""
import json
import threading
import tracemalloc

import pytest

import hostile
from hostile import MODELS, SECRET, SPEC_METRICS
from mtp_viz.engine.events import Accepted, Bonus, Done, Error, Token
from mtp_viz.sources.vllm import client
from mtp_viz.sources.vllm.stream import generate

PROMPT = "def f():"


@pytest.fixture
def serve():
    with hostile.serving() as start:
        yield lambda completions: start({"/v1/models": json.dumps(MODELS), "/metrics": SPEC_METRICS,
                                         "/v1/completions": completions})


def _chunk(ids, *, logprobs=None, text=None, finish=None, prompt=(2, 3)):
    """One completions chunk as vLLM streams it: ids, their text and their logprobs."""
    strings = ["x"] * len(ids)
    lp = logprobs if logprobs is not None else {"tokens": strings, "token_logprobs": [-0.1] * len(ids)}
    return {"prompt_token_ids": list(prompt) if prompt else None, "choices": [{
        "index": 0, "text": "x" * len(ids) if text is None else text, "token_ids": list(ids),
        "finish_reason": finish, "logprobs": lp}]}


def _final(accepted, drafted):
    return {"choices": [], "usage": {"completion_tokens": 1 + len(accepted)},
            "metrics": {"speculative_decoding": {"num_spec_steps": len(accepted), "per_step_accepted": accepted,
                                                 "per_step_drafted": drafted}}}


def _sse(*chunks) -> bytes:
    return b"".join(b"data: " + json.dumps(c).encode() + b"\n\n" for c in chunks) + b"data: [DONE]\n\n"


def _stream(*parts: bytes, hung_up: threading.Event | None = None, sent: list | None = None):
    """A streamed answer that writes ``parts`` (in 64 KiB pieces), then ends the body;
    ``hung_up`` is set if the client closed the connection first, ``sent`` counts the
    bytes written before that."""
    def answer(h):
        h.send_response(200)
        h.send_header("Content-Type", "text/event-stream")
        h.send_header("Connection", "close")
        h.end_headers()
        try:
            for part in parts:
                view = memoryview(part)
                for at in range(0, len(view), 65536):
                    h.wfile.write(view[at:at + 65536])
                    if sent is not None:
                        sent.append(min(65536, len(view) - at))
            h.wfile.flush()
        except OSError:
            if hung_up is not None:
                hung_up.set()
        h.close_connection = True
    return answer


def _one_sentence(events, n):
    """The run ended with exactly one Error, and never held more than ``n`` tokens."""
    assert isinstance(events[-1], Error) and sum(isinstance(e, Error) for e in events) == 1
    assert not any(isinstance(e, Done) for e in events)
    assert sum(isinstance(e, (Accepted, Bonus, Token)) for e in events) <= n
    msg = events[-1].message
    assert "\n" not in msg and SECRET not in msg and msg.endswith(".") and len(msg) < 300
    return msg


# ------------------------------------------------------------- a flood in one line

FLOOD = 100_000
# One SSE line carrying 100,000 tokens (about 1.7 MB, under the old 4 MiB line cap), with
# arrays that fit them: a prefill and 25,000 steps of 4 drafts, 3 kept; then 16 MB of
# keep-alive comments, more than a loopback connection buffers, so a client that does not
# hang up reads them all.
FLOOD_LINE = _sse(_chunk([7] * FLOOD, finish="length"), _final([3] * 25_000, [4] * 25_000))
PADDING = (b": " + b"p" * 1021 + b"\n") * (16 * 1024)


def test_a_flood_of_100000_tokens_in_one_line_is_one_sentence_and_never_read_whole(serve):
    hung_up, sent = threading.Event(), []
    _, url = serve(_stream(FLOOD_LINE, PADDING, hung_up=hung_up, sent=sent))
    tracemalloc.start()
    try:
        events = list(generate(url, PROMPT, max_new_tokens=64))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    msg = _one_sentence(events, 64)
    assert "sent a stream line over" in msg and "more than mtp-viz reads" in msg
    assert sum(isinstance(e, (Accepted, Bonus, Token)) for e in events) == 0
    # memory: the reader held about its cap (under 1 MiB a line for 64 tokens, see below),
    # not the 1.7 MB line, let alone its 100,000 tokens
    assert peak < 3 * 1024 * 1024, f"peak {peak} bytes"
    # the client hung up: the server could not send all it had (16 MB is more than the buffers hold)
    assert hung_up.wait(30), "the client read the whole flood instead of hanging up"
    assert sum(sent) < len(FLOOD_LINE) + len(PADDING)


def test_a_body_of_short_lines_past_the_cap_is_one_sentence_and_the_client_hangs_up(serve):
    """Lines each under the cap (keep-alive comments, 16 MB of them after one token) are
    bounded in all: the client hangs up at its body cap, not at the server's leisure."""
    hung_up, sent = threading.Event(), []
    first = b"data: " + json.dumps(_chunk([5])).encode() + b"\n\n"
    _, url = serve(_stream(first, PADDING, hung_up=hung_up, sent=sent))
    msg = _one_sentence(list(generate(url, PROMPT, max_new_tokens=8)), 8)
    assert hung_up.wait(30), "the client read the whole body instead of hanging up"
    assert sum(sent) < len(first) + len(PADDING)
    _, body_cap = client.stream_caps({"max_tokens": 8, "prompt": PROMPT})
    assert msg == f"The server at {url} sent more than {body_cap} bytes for the tokens asked, more than mtp-viz reads."


def test_the_line_and_body_caps_follow_the_request():
    small, small_body = client.stream_caps({"max_tokens": 64, "prompt": PROMPT})
    big, _ = client.stream_caps({"max_tokens": 512, "prompt": PROMPT})
    chat, _ = client.stream_caps({"max_tokens": 64, "messages": [{"role": "user", "content": "é" * 1000}]})
    assert small < big <= client.MAX_LINE_BYTES and small < chat and small_body == 2 * small
    assert client.stream_caps({"max_tokens": 10**9, "prompt": PROMPT})[0] == client.MAX_LINE_BYTES
    assert small < 1024 * 1024   # a 64-token answer reads well under a MiB a line


# ------------------------------------------------------------- more tokens than asked

MORE = 200   # one-token chunks for a 16-token request


@pytest.mark.parametrize("mode", ["speculative", "autoregressive"])
def test_more_chunks_than_asked_is_one_sentence_at_the_limit(serve, mode):
    chunks = [_chunk([10 + i], prompt=(2, 3) if i == 0 else None) for i in range(MORE)]
    chunks[-1]["choices"][0]["finish_reason"] = "length"
    server, url = serve(_stream(_sse(*chunks, _final([3] * 49 + [2], [4] * 50))))
    events = list(generate(url, PROMPT, max_new_tokens=16, mode=mode))
    msg = _one_sentence(events, 16)
    assert msg == f"The server at {url} sent more than the 16 tokens asked for."
    if mode == "autoregressive":   # the tokens up to the limit were shown as they came
        assert [e.token_id for e in events if isinstance(e, Token)] == list(range(10, 26))
    assert server.seen.count("/v1/completions") == 1


def test_more_text_than_the_tokens_can_carry_is_one_sentence(serve):
    _, url = serve(_stream(_sse(_chunk([5], text="y" * 40_000, finish="length"), _final([], []))))
    msg = _one_sentence(list(generate(url, PROMPT, max_new_tokens=16)), 16)
    assert msg == f"The server at {url} sent more text than the 16 tokens asked for can carry."


# ------------------------------------------------------------- arrays that disagree with the tokens

MISMATCH = "sent token ids or log-probabilities that do not match its tokens"
STEPS = "reported steps that do not match its tokens"


@pytest.mark.parametrize("chunk, final, words", [
    # per-step arrays that are not whole numbers, or a draft longer than any drafter's
    (_chunk([1, 2, 3, 4, 5], finish="length"), _final(["3"], [4]), STEPS),
    (_chunk([1, 2, 3, 4, 5], finish="length"), _final([1.5], [4]), STEPS),
    (_chunk([1, 2, 3, 4, 5], finish="length"), _final([3], [10**9]), STEPS),
    (_chunk([1, 2, 3], finish="length"), _final([True], [4]), STEPS),
    # token ids that are not vocabulary indices
    (_chunk([1, 2.7, 3], finish="length"), _final([1], [4]), MISMATCH),
    (_chunk([1, -5, 3], finish="length"), _final([1], [4]), MISMATCH),
    (_chunk([1, 2**40, 3], finish="length"), _final([1], [4]), MISMATCH),
    # logprobs that are not one per token, or not log-probabilities
    (_chunk([1, 2, 3], logprobs={"tokens": ["x"], "token_logprobs": [-0.1]}, finish="length"),
     _final([1], [4]), MISMATCH),
    (_chunk([1, 2, 3], logprobs={"tokens": ["x"] * 3, "token_logprobs": [-0.1] * 7}, finish="length"),
     _final([1], [4]), MISMATCH),
    (_chunk([1, 2, 3], logprobs={"tokens": ["x"] * 3, "token_logprobs": [-0.1, 1000.0, -0.1]}, finish="length"),
     _final([1], [4]), MISMATCH),
    # prompt ids that are not ids
    (_chunk([1, 2, 3], prompt=("a", 3), finish="length"), _final([1], [4]), MISMATCH),
])
def test_arrays_ids_and_logprobs_that_disagree_with_the_tokens_are_one_sentence(serve, chunk, final, words):
    _, url = serve(_stream(_sse(chunk, final)))
    msg = _one_sentence(list(generate(url, PROMPT, max_new_tokens=16)), 16)
    assert msg == f"The server at {url} {words}."


def test_a_consistent_answer_still_reads(serve):
    """The checks refuse only what disagrees: 1 + (3 + 1) + (1 + 1) tokens, cut by the limit."""
    _, url = serve(_stream(_sse(_chunk([1, 2, 3, 4, 5, 6, 7], finish="length"), _final([3, 1], [4, 4]))))
    events = list(generate(url, PROMPT, max_new_tokens=7))
    assert isinstance(events[-1], Done) and events[-1].generated_ids == (1, 2, 3, 4, 5, 6, 7)


# ------------------------------------------------------------- a server that is not vLLM

@pytest.mark.parametrize("code", [418, 500])
def test_a_server_answering_an_http_error_has_an_operators_and_a_visitors_sentence(code):
    server, url = hostile.serve(lambda h: hostile.reply(code, f"<h1>{SECRET}</h1>")(h))
    try:
        (error,) = list(generate(url, PROMPT, max_new_tokens=8))
        assert isinstance(error, Error) and f"HTTP {code}" in error.message   # the CLI's: the details
        with pytest.raises(client.UserError) as e:
            client.served_models(url)
        assert f"HTTP {code}" in str(e.value) and "/v1/models" in str(e.value)
        # the app's sentences: by role (the Traffic panel) or by the address the visitor typed
        assert e.value.visitor("the baseline server", "the baseline server's address") == \
            "The baseline server is not a vLLM server."
        assert e.value.visitor() == f"The server at {url} is not a vLLM server."
    finally:
        server.shutdown()
        server.server_close()
