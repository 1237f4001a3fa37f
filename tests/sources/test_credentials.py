"""A URL's userinfo (``http://user:password@host``) is sent as Basic authentication and
never repeated: not in a sentence, not in a run's start event, not in a record."""
import base64
import json

import pytest

from hostile import MODELS, SPEC_METRICS, closed_url, serving
from mtp_viz.cli.main import main
from mtp_viz.errors import UserError
from mtp_viz.sources import http
from mtp_viz.sources.vllm.stream import events

PASSWORD = "hunter2-the-operators"


def with_password(url: str) -> str:
    return url.replace("http://", f"http://alice:{PASSWORD}@")


def test_public_strips_the_userinfo_and_keeps_the_rest():
    assert http.public(f"http://alice:{PASSWORD}@10.0.0.1:8000/v1") == "http://10.0.0.1:8000/v1"
    assert http.public("https://bob@[::1]:9/x") == "https://[::1]:9/x"
    assert http.public("http://127.0.0.1:8000") == "http://127.0.0.1:8000"


def test_a_server_that_is_down_is_named_without_its_password(capsys):
    url = closed_url()
    code = main(["generate", "--server", with_password(url), "--prompt", "hi", "--max-new-tokens", "2"])
    err = capsys.readouterr().err
    assert code == 2 and PASSWORD not in err and "alice" not in err
    assert err.strip() == (f"mtp-viz: error: No server answers at {url}; start vLLM or llama.cpp there or "
                           "check the address.")


def test_a_url_that_is_not_an_address_is_refused_without_its_password():
    with pytest.raises(UserError) as e:
        http.base_url(f"http://alice:{PASSWORD}")     # no host: the password would be the port
    assert PASSWORD not in str(e.value) and "is not a server address" in str(e.value)


def test_the_userinfo_is_sent_as_basic_authentication_and_kept_out_of_the_run():
    seen = []

    def completions(h):
        seen.append(h.headers.get("Authorization"))
        chunk = {"prompt_token_ids": [2], "choices": [{"text": "x", "token_ids": [5], "finish_reason": "length"}]}
        hostile.reply(200, f"data: {json.dumps(chunk)}\n\ndata: [DONE]\n\n")(h)

    import hostile
    with serving() as start:
        _, url = start({"/v1/models": json.dumps(MODELS), "/metrics": SPEC_METRICS, "/v1/completions": completions})
        run = list(events(with_password(url), "hi", mode="autoregressive", max_new_tokens=1))
    assert seen == ["Basic " + base64.b64encode(f"alice:{PASSWORD}".encode()).decode()]
    assert run[0].settings["server"] == url and PASSWORD not in json.dumps([e.to_dict() for e in run])
