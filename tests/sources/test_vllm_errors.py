"""A server that is down or is not vLLM: one sentence, from the generator and the CLI.

These need no vLLM: the "wrong" servers are small real HTTP servers on 127.0.0.1
(a plain web server, an OpenAI-compatible server that is not vLLM). The same errors
against a real vLLM server (a model it does not serve, a server without speculation)
are in test_vllm.py.
"""
import json

import pytest

import hostile
from hostile import SECRET
from mtp_viz.cli.main import main
from mtp_viz.engine.events import Error
from mtp_viz.sources.vllm.stream import generate


@pytest.fixture
def web_server():
    server, url = hostile.serve({"/": (200, "<h1>hello</h1>")})
    yield url
    server.shutdown()


@pytest.fixture
def other_openai_server():
    models = {"object": "list", "data": [{"id": SECRET, "object": "model", "owned_by": "someone"}]}
    server, url = hostile.serve({"/v1/models": (200, json.dumps(models))})
    yield url
    server.shutdown()


@pytest.fixture
def vllm_without_metrics():
    models = {"data": [{"id": "m", "owned_by": "vllm", "max_model_len": 64}]}
    server, url = hostile.serve({"/v1/models": (200, json.dumps(models)), "/metrics": (200, "<html>")})
    yield url
    server.shutdown()


def _one_error(url, **kw):
    events = list(generate(url, "def f():", **kw))
    assert len(events) == 1 and isinstance(events[0], Error)
    msg = events[0].message
    assert "\n" not in msg and SECRET not in msg and "Traceback" not in msg
    return msg


def test_server_down():
    url = hostile.closed_url()
    assert _one_error(url) == f"No server answers at {url}; start vLLM there or check the address."


def test_not_a_server_address():
    assert "is not a server address" in _one_error("localhost:8000")


def test_plain_web_server(web_server):
    assert _one_error(web_server) == (f"{web_server} is not a vLLM server: it answers /v1/models "
                                      "with HTTP 404.")


def test_openai_compatible_but_not_vllm(other_openai_server):
    assert "is an OpenAI-compatible server but not vLLM" in _one_error(other_openai_server)


def test_garbage_metrics_and_settings(vllm_without_metrics):
    assert "its /metrics is not a Prometheus page" in _one_error(vllm_without_metrics, max_new_tokens=8)
    assert "do not fit the server's context of 64 tokens" in _one_error(vllm_without_metrics,
                                                                         max_new_tokens=64)
    assert _one_error(vllm_without_metrics, temperature=-1,
                                                             max_new_tokens=8).startswith("Temperature must be")


def test_cli_exit_2_with_one_line(web_server, capsys):
    assert main(["generate", "--server", web_server, "--prompt", "x"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("mtp-viz: error: ") and len(err.splitlines()) == 1 and SECRET not in err
    assert main(["generate", "--server", web_server, "--prompt", "x", "--draft-tokens", "2"]) == 2
    assert "--draft-tokens applies to the local engine" in capsys.readouterr().err
    assert main(["generate", "--model", "m", "--prompt", "x"]) == 2
    assert "--model names a model served by --server" in capsys.readouterr().err
    assert main(["bench", "--baseline-server", web_server]) == 2
    assert "--baseline-server needs --server" in capsys.readouterr().err
