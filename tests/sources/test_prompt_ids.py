"""A run keeps at most served.PROMPT_IDS_KEPT (2,048) of a server's prompt ids in its
start event, and the whole count: before, every id of a server's /tokenize answer was kept
with the run (650,000 ids: 23.5 MB a run, per app session until its next run)."""
import json

import pytest

from hostile import MODELS, SPEC_METRICS, serving
from mtp_viz.engine.events import Start
from mtp_viz.sources import open_source
from mtp_viz.sources.settings import RunSettings
from mtp_viz.sources.vllm.stream import events

IDS = list(range(3, 500_003))


@pytest.fixture
def start():
    with serving() as start:
        yield start


def test_a_llamacpp_run_keeps_2048_of_the_servers_prompt_ids(start):
    chunks = [{"content": "x", "tokens": [5], "stop": False, "tokens_predicted": 1, "timings": {}},
              {"stop": True, "stop_type": "limit", "tokens": [], "content": ""}]
    _, url = start({"/props": json.dumps({"default_generation_settings": {}, "build_info": "b0"}),
                    "/slots": json.dumps([{"id": 0}]), "/tokenize": json.dumps({"tokens": IDS}),
                    "/completion": "".join(f"data: {json.dumps(c)}\n\n" for c in chunks)})
    run = [e for _, e in open_source(server=url).runs(RunSettings("hi", modes=("autoregressive",),
                                                                  max_new_tokens=1, chat=False))]
    first = run[0]
    assert isinstance(first, Start) and first.prompt_tokens == len(IDS)
    assert first.prompt_ids == tuple(IDS[:2048]) and first.settings["prompt_ids_kept"] == 2048
    assert run[-1].type == "done"


def test_a_vllm_run_keeps_2048_of_the_prompt_ids_its_stream_carries(start):
    ids = list(range(3, 5003))
    chunk = {"prompt_token_ids": ids, "choices": [{"text": "x", "token_ids": [5], "finish_reason": "length"}]}
    _, url = start({"/v1/models": json.dumps(MODELS), "/metrics": SPEC_METRICS,
                    "/v1/completions": f"data: {json.dumps(chunk)}\n\ndata: [DONE]\n\n"})
    first = next(events(url, "hi", mode="autoregressive", max_new_tokens=1))
    assert first.prompt_tokens == 5000 and first.prompt_ids == tuple(ids[:2048])
    assert first.settings["prompt_ids_kept"] == 2048
