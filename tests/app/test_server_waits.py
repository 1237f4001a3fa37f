"""The app's server runs against servers that trickle or break (tests/trickling.py,
tests/hostile.py), through the handlers as the page calls them: Stop ends any wait on a
server within a second (the run's handler returns, so its MTP_VIZ_VLLM_CONCURRENCY slot is
free at once), and a broken stream is a sentence."""
import json
import threading
import time

import pytest

from hostile import serving
from mtp_viz.app.handlers import servers as server_handlers
from mtp_viz.app.handlers.local import OUTPUTS, Handlers
from mtp_viz.app.runtime import deploy, runs, service
from mtp_viz.app.runtime.guard import ServerPolicy
from trickling import http as answer, pacing, sse, stream_head

STATUS = OUTPUTS.index("status")
PROPS = answer(json.dumps({"default_generation_settings": {"n_ctx": 1024}, "build_info": "b0"}))
SLOTS = answer(json.dumps([{"n_ctx": 1024, "speculative": True}]))
TOKENIZE = answer(json.dumps({"tokens": [2, 10]}))
TOKEN = {"content": "x", "tokens": [5], "stop": False, "tokens_predicted": 1, "timings": {}}


def handlers():
    h = Handlers(service.PairLoader(lambda t, d: None), deploy.presets(deploy.AllowList("")), ("tiny", None), 64, 256)
    return server_handlers.ServerHandlers(h, ServerPolicy(deploy.AllowList(""), ""))


def values(url):
    return dict(prompt="def f(x):", model=server_handlers.VLLM, custom_target="", custom_drafter="", max_new_tokens=4,
                draft_tokens=4, schedule="constant", drafter_kind="mtp", decoding="greedy", temperature=0.8,
                top_p=0.95, top_k=0, seed=0, chat=False, baseline=False, vllm_url=url, vllm_baseline_url="")


def run_in_thread(url, sess):
    frames, finished = [], threading.Event()

    def go():
        try:
            frames.extend(handlers().run(values(url), sess))
        finally:
            finished.set()
    threading.Thread(target=go, daemon=True).start()
    return frames, finished


@pytest.mark.parametrize("where", ["/props", "/tokenize", "/completion"])
def test_stop_ends_a_run_that_waits_on_a_trickling_server_within_a_second(where):
    routes = {"/props": (PROPS, None), "/slots": (SLOTS, None), "/tokenize": (TOKENIZE, None),
              "/completion": (stream_head() + sse(TOKEN), len(stream_head()) + 3)}
    routes[where] = (routes[where][0], 5)            # this page a byte every 0.5 s
    with pacing(routes) as (url, _):
        sess = runs.Session()
        frames, finished = run_in_thread(url, sess)
        time.sleep(1.5)
        assert not finished.is_set()                 # held by the server
        t0 = time.monotonic()
        handlers().h.stop(sess)
        assert finished.wait(1.0), "Stop did not end the wait within a second"
        took = time.monotonic() - t0
    assert took < 1.0 and not any("mv-msg-error" in str(f[STATUS]) for f in frames if f[STATUS] is not None)


def test_a_broken_stream_is_a_sentence_in_the_app():
    chunks = [{"content": "x", "tokens": [5], "stop": False, "tokens_predicted": 1,
               "timings": {"draft_n": 4, "draft_n_accepted": 2}},
              {"content": "y", "tokens": [6], "stop": False, "tokens_predicted": 2,
               "timings": {"draft_n": 2, "draft_n_accepted": 0}},     # the counts fall
              {"stop": True, "stop_type": "limit", "tokens": [], "content": ""}]
    with serving() as start:
        body = lambda whole: whole.split(b"\r\n\r\n", 1)[1].decode()  # noqa: E731
        _, url = start({"/props": body(PROPS), "/slots": body(SLOTS), "/tokenize": json.dumps({"tokens": [2]}),
                        "/completion": "".join(f"data: {json.dumps(c)}\n\n" for c in chunks)})
        frames = list(handlers().run(values(url), runs.Session()))
    errors = [str(f[STATUS]) for f in frames if "mv-msg-error" in str(f[STATUS])]
    assert errors and "draft counts that fall or jump" in errors[-1]
    assert "Something went wrong" not in errors[-1] and "Mismatch" not in errors[-1]
