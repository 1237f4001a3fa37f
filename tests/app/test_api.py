"""The `/generate` API through a real `gradio_client` against the running app, on a small
random Gemma 4 pair saved to disk: greedy output equals transformers' own greedy
`generate()`, a seeded sampled call repeats exactly, bad input is one `error` event,
and the app keeps serving."""
from __future__ import annotations

import pytest
import torch

from factories import save_gemma_pair
from serving import serve

PROMPT = " ".join(f"w{i}" for i in range(10, 40))


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    return save_gemma_pair(tmp_path_factory.mktemp("api"))



@pytest.fixture(scope="module")
def app(folders):
    from gradio_client import Client

    from mtp_viz.app.page import layout as ui
    demo = ui.build_demo(target=str(folders[0]))
    url = serve(demo)
    yield demo, Client(url, verbose=False)
    demo.close()


def _reference(demo, folders, n):
    from mtp_viz.app.runtime.pairs import PairSpec
    pair = demo.mtp_app.loader.wait(PairSpec(str(folders[0])), timeout=300).pair
    ids = torch.tensor([pair.encode(PROMPT, chat=False)])
    out = pair.target.generate(ids, do_sample=False, max_new_tokens=n, pad_token_id=0,
                               eos_token_id=pair.eos_token_ids)
    return out[0, ids.shape[1]:].tolist()


def _ids(events):
    return [e["token_id"] for e in events if e["type"] in ("accepted", "bonus", "token")]


def test_only_generate_is_on_the_api_page(app):
    _, client = app
    assert set(client.view_api(return_format="dict", print_info=False)["named_endpoints"]) == {"/generate"}


@pytest.mark.parametrize("mode", ["speculative", "autoregressive"])
def test_greedy_generate_equals_transformers(app, folders, mode):
    demo, client = app
    events = client.predict(prompt=PROMPT, mode=mode, max_new_tokens=24, chat=False,
                            api_name="/generate")
    assert events[0]["type"] == "start" and events[0]["mode"] == mode
    assert events[-1]["type"] == "done"
    assert _ids(events) == list(events[-1]["generated_ids"]) == _reference(demo, folders, 24)
    if mode == "speculative":
        assert any(e["type"] == "drafted" for e in events)


def test_streaming_and_a_seeded_sampled_call_repeats_exactly(app):
    _, client = app
    kw = dict(prompt=PROMPT, max_new_tokens=20, temperature=0.9, top_p=0.95, top_k=40, seed=123,
              chat=False, api_name="/generate")
    job = client.submit(**kw)
    partials = list(job)
    final = job.outputs()[-1]
    assert partials and final[-1]["type"] == "done"
    assert all(len(a) <= len(b) for a, b in zip(partials, partials[1:]))  # a growing stream
    again = client.predict(**kw)
    assert _ids(final) == _ids(again)


@pytest.mark.parametrize("kw, sentence", [
    (dict(prompt="  "), "Type a prompt first"),
    (dict(prompt=PROMPT, mode="sideways"), "Unknown mode"),
    (dict(prompt=PROMPT, drafter="oracle"), "Unknown drafter"),
    (dict(prompt=PROMPT, schedule="fastest"), "Unknown schedule"),
    (dict(prompt=PROMPT, temperature=0.5, seed=2 ** 64), "seed must be a whole number"),
    (dict(prompt=PROMPT, max_new_tokens=10 ** 6), "Max new tokens must be between"),
    (dict(prompt=PROMPT, draft_tokens=0), "Draft tokens must be"),
    (dict(prompt=PROMPT, model="/no/such/folder"), "There is no loadable model folder at /no/such/folder."),
])
def test_bad_input_is_one_error_event_and_the_app_keeps_serving(app, kw, sentence):
    _, client = app
    events = client.predict(**{"chat": False, **kw}, api_name="/generate")
    assert len(events) == 1 and events[0]["type"] == "error" and sentence in events[0]["message"]
    ok = client.predict(prompt=PROMPT, max_new_tokens=4, chat=False, api_name="/generate")
    assert ok[-1]["type"] == "done" and ok[-1]["new_tokens"] == 4


def _raw_call(url: str, body: str) -> list:
    """The HTTP API without gradio_client, which cannot even send NaN or a lone
    surrogate: POST the JSON text as written, then read the event stream's last data."""
    import json
    import urllib.request
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    req = urllib.request.Request(url + "gradio_api/call/generate", data=body.encode("ascii"),
                                 headers={"Content-Type": "application/json"})
    event_id = json.loads(opener.open(req, timeout=60).read())["event_id"]
    stream = opener.open(url + f"gradio_api/call/generate/{event_id}", timeout=300).read().decode()
    data = [line[len("data:"):].strip() for line in stream.splitlines() if line.startswith("data:")]
    return json.loads(data[-1])[0]


@pytest.mark.parametrize("body, sentence", [
    ('{"data": ["%s", "", "speculative", "auto", 8, 4, "constant", NaN, 1.0, 0, null, false]}' % PROMPT,
     "Temperature must be a finite number"),
    ('{"data": ["%s", "", "speculative", "auto", 8, 4, "constant", 0.5, Infinity, 0, 1, false]}' % PROMPT,
     "Top-p must be a finite number"),
    ('{"data": ["w10 \\udcff w11", "", "speculative", "auto", 8, 4, "constant", 0, 1.0, 0, null, false]}',
     "The prompt is not valid UTF-8 text."),
])
def test_raw_http_non_finite_numbers_and_lone_surrogates(app, body, sentence):
    demo, client = app
    events = _raw_call(client.src if client.src.endswith("/") else client.src + "/", body)
    assert len(events) == 1 and events[0]["type"] == "error" and sentence in events[0]["message"]
    ok = client.predict(prompt=PROMPT, max_new_tokens=4, chat=False, api_name="/generate")
    assert ok[-1]["type"] == "done"


@pytest.mark.slow
def test_allow_list_refuses_other_models_without_loading(folders, monkeypatch):
    from gradio_client import Client

    from mtp_viz.app.page import layout as ui
    from mtp_viz.app.runtime import loading, service
    monkeypatch.setenv("MTP_VIZ_ALLOWED_MODELS", str(folders[0]))
    loads = []

    def load(t, d):
        loads.append(t)
        return loading.load_and_warm(t, d)

    demo = ui.build_demo(loader=service.PairLoader(load))
    try:
        client = Client(serve(demo), verbose=False)
        for model in ("tiny", "google/gemma-4-E2B-it", str(folders[1]), "/root"):
            events = client.predict(prompt=PROMPT, model=model, chat=False, api_name="/generate")
            assert events == [{"type": "error",
                               "message": "This deployment only serves the models in its picker."}]
        ok = client.predict(prompt=PROMPT, max_new_tokens=4, chat=False, api_name="/generate")
        assert ok[-1]["type"] == "done" and loads == [str(folders[0])]  # the default, loaded once
    finally:
        demo.close()
