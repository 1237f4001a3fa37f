"""Broken llama.cpp and vLLM streams are the project's own error, one sentence on every
surface: draft counts that fall or jump, and a stream cut before its last chunk (never a
run that ended with "eos"). The servers are small real HTTP servers (tests/hostile.py)."""
import json

import pytest

from hostile import MODELS, SECRET, SPEC_METRICS, serving
from mtp_viz.cli.main import main
from mtp_viz.engine.events import Error
from mtp_viz.sources import open_source
from mtp_viz.sources.http import ServerError
from mtp_viz.sources.settings import RunSettings
from mtp_viz.sources.vllm.stream import generate

PROPS = {"default_generation_settings": {"n_ctx": 1024}, "build_info": "b0", "model_path": SECRET}
SLOTS = [{"id": 0, "n_ctx": 1024, "speculative": True}]


def chunk(token, n, drafted=0, accepted=0):
    return {"content": "x", "tokens": [token], "stop": False, "tokens_predicted": n,
            "timings": {"draft_n": drafted, "draft_n_accepted": accepted}}


STOP = {"stop": True, "stop_type": "limit", "tokens": [], "content": ""}
FALLS = [chunk(5, 1), chunk(6, 2, 4, 2), chunk(7, 3, 4, 2), chunk(8, 4, 4, 2), chunk(9, 5, 2, 2), STOP]
JUMPS = [chunk(5, 1), chunk(6, 2, 300, 0), STOP]
CUT = [chunk(5, 1)]   # one token, then the connection closes: no stop chunk


@pytest.fixture
def llama():
    with serving() as start:
        def server(chunks):
            body = "".join(f"data: {json.dumps(c)}\n\n" for c in chunks)
            return start({"/props": json.dumps(PROPS), "/slots": json.dumps(SLOTS),
                          "/tokenize": json.dumps({"tokens": [2, 10]}), "/completion": body})[1]
        yield server


def run(url, mode="speculative"):
    return list(open_source(server=url).runs(RunSettings("hi", modes=(mode,), max_new_tokens=5, chat=False)))


@pytest.mark.parametrize("chunks, words", [
    (FALLS, "draft counts that fall or jump"),
    (JUMPS, "draft counts that fall or jump"),
    (CUT, "ended the stream after 1 token, before its last chunk"),
])
def test_a_broken_llamacpp_stream_is_a_server_error_in_the_library(llama, chunks, words):
    url = llama(chunks)
    with pytest.raises(ServerError) as e:
        run(url)
    assert str(e.value).startswith(f"The server at {url} ") and words in str(e.value)
    assert words in e.value.visitor("the speculating server") and url not in e.value.visitor("the speculating server")


@pytest.mark.parametrize("chunks", [FALLS, CUT])
def test_a_broken_llamacpp_stream_is_one_sentence_on_the_cli(llama, capsys, chunks):
    code = main(["generate", "--server", llama(chunks), "--prompt", "hi", "--max-new-tokens", "5",
                 "--no-chat-template"])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and err.startswith("mtp-viz: error: The server at ")
    assert "Traceback" not in err and "Mismatch" not in err and SECRET not in err


def test_a_cut_plain_stream_is_not_a_run_that_ended(llama):
    with pytest.raises(ServerError, match="before its last chunk"):
        run(llama(CUT), mode="autoregressive")
    assert run(llama(CUT + [STOP]), mode="autoregressive")[-1][1].stop_reason == "max_new_tokens"


def test_a_cut_vllm_stream_is_one_error_not_eos():
    token = {"prompt_token_ids": [2], "choices": [{"text": "x", "token_ids": [5], "finish_reason": None}]}
    with serving() as start:
        _, url = start({"/v1/models": json.dumps(MODELS), "/metrics": SPEC_METRICS,
                        "/v1/completions": f"data: {json.dumps(token)}\n\n"})
        events = list(generate(url, "hi", mode="autoregressive", max_new_tokens=4))
    assert isinstance(events[-1], Error) and "done" not in [e.type for e in events]
    assert events[-1].message == f"The server at {url} ended the stream after 1 token, before its last chunk."
