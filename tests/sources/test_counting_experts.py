"""Counting experts through the sources: ``pair.generate(..., experts=True)`` and
``RunSettings(experts=True)`` on a mixture-of-experts pair saved as folders (the
26B-A4B's classes), the one-sentence refusal on a dense pair, on a vLLM server and for a
setting that is not a switch, and the trace format's round trip of the new field."""
import json

import pytest

from factories import save_gemma_pair, save_moe_pair
from invariants import check_invariants, generated
from mtp_viz.engine.events import Start, Step
from mtp_viz.errors import UserError
from mtp_viz.sources import trace
from mtp_viz.sources.local import DENSE, LocalSource
from mtp_viz.sources.models import load_pair
from mtp_viz.sources.servers import Servers
from mtp_viz.sources.settings import RunSettings
from mtp_viz.sources.vllm.source import VllmSource

PROMPT = " ".join(f"w{i}" for i in range(10, 40))
N = 16


@pytest.fixture(scope="module")
def moe(tmp_path_factory):
    return load_pair(str(save_moe_pair(tmp_path_factory.mktemp("moe"))[0]))


@pytest.fixture(scope="module")
def dense(tmp_path_factory):
    return load_pair(str(save_gemma_pair(tmp_path_factory.mktemp("dense"))[0]))


@pytest.fixture(scope="module")
def counted(moe):
    """Both modes of one comparison, taking turns as the app runs them, experts counted."""
    runs = {"speculative": [], "autoregressive": []}
    for mode, e in LocalSource(moe).runs(RunSettings(PROMPT, chat=False, max_new_tokens=N, experts=True)):
        runs[mode].append(e)
    return runs


def test_both_modes_count_on_every_step(moe, counted):
    assert moe.is_moe
    for mode, events in counted.items():
        steps = check_invariants(events, N)  # includes the counts' bounds (invariants.check_experts)
        assert events[0].settings["experts"] == {"layers": 4, "num_experts": 8, "top_k": 2, "counted": True}
        assert all(len(s.experts_per_layer) == 4 for s in steps), mode
    plain = [e for e in counted["autoregressive"] if isinstance(e, Step)][1:]
    assert all(s.experts_per_layer == (2, 2, 2, 2) for s in plain)
    assert generated(counted["speculative"]) == generated(counted["autoregressive"])  # greedy


def test_pair_generate_counts_and_leaves_the_tokens_alone(moe):
    on = list(moe.generate(PROMPT, max_new_tokens=N, chat=False, experts=True))
    off = list(moe.generate(PROMPT, max_new_tokens=N, chat=False))
    assert generated(on) == generated(off)
    assert all(s.experts_per_layer for s in on if isinstance(s, Step))
    assert not any(s.experts_per_layer for s in off if isinstance(s, Step))
    assert off[0].settings["experts"] == {"layers": 4, "num_experts": 8, "top_k": 2, "counted": False}


def test_a_dense_pair_is_refused_in_one_sentence(dense):
    assert not dense.is_moe and DENSE.count(". ") == 0 and DENSE.endswith(".")
    for mode in ("speculative", "autoregressive"):
        with pytest.raises(UserError) as e:
            dense.generate(PROMPT, mode=mode, experts=True, chat=False)  # before any event
        assert str(e.value) == DENSE
    with pytest.raises(UserError, match="^This target is dense"):
        list(LocalSource(dense).runs(RunSettings(PROMPT, chat=False, experts=True)))
    start = next(iter(dense.generate(PROMPT, chat=False)))
    assert isinstance(start, Start) and start.settings["experts"] == {}


def test_the_setting_is_a_switch_and_a_vllm_server_cannot_count():
    with pytest.raises(UserError, match="^Count experts must be true or false.$"):
        RunSettings(PROMPT, experts="yes").validate()
    with pytest.raises(UserError, match="^A vLLM server does not report which experts its router chose"):
        list(VllmSource(Servers("http://127.0.0.1:9")).runs(RunSettings(PROMPT, experts=True)))


def test_the_trace_keeps_the_counts(counted, tmp_path):
    events = counted["speculative"] + counted["autoregressive"]
    path = trace.write(tmp_path / "moe.jsonl", events)
    assert trace.read(path) == events
    lines = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()[1:]]
    steps = [d for d in lines if d["type"] == "step"]
    assert all(isinstance(d["experts_per_layer"], list) and len(d["experts_per_layer"]) == 4 for d in steps)
    # not counted: the field is left out, and the trace reads as before
    plain = [e for e in trace.loads(trace.dumps(events)) if isinstance(e, Step)]
    assert plain == [e for e in events if isinstance(e, Step)]


def _step(**extra) -> str:
    return json.dumps({"type": "step", "step": 1, "draft_tokens": 0, "accepted": 0, **extra})


def _start(experts) -> str:
    return json.dumps({"type": "start", "mode": "speculative", "prompt_tokens": 1, "settings": {"experts": experts}})


@pytest.mark.parametrize("line, sentence", [
    (_step(experts_per_layer=[2, -1]),
     "has a 'experts_per_layer' that is not at most 1024 expert counts from 0 to 4096"),
    (_step(experts_per_layer=[2, 5000]), "has a 'experts_per_layer' that is not at most 1024 expert counts"),
    (_step(experts_per_layer=[2] * 1025), "has a 'experts_per_layer' that is not at most 1024 expert counts"),
    (_step(experts_per_layer=[2, 2.5]), "has a field of the wrong type"),
    (_step(experts_per_layer=[True]), "has a field of the wrong type"),
    (_step(experts_per_layer=3), "has a field of the wrong type"),
    (_start({"layers": 4, "num_experts": 2, "top_k": 3}), "has a settings 'experts' that is not empty or a mixture"),
    (_start({"layers": 4, "num_experts": 8}), "has a settings 'experts' that is not empty or a mixture"),
    (_start({"layers": 4, "num_experts": 8, "top_k": 2, "counted": "yes"}), "has a settings 'experts'"),
    (_start([1, 2]), "has a settings 'experts' that is not empty or a mixture"),
])
def test_bad_counts_in_a_trace_get_one_sentence(line, sentence):
    start = _start({"layers": 2, "num_experts": 8, "top_k": 2, "counted": True})
    text = "\n".join([line] if line.startswith('{"type": "start"') else [start, line])
    with pytest.raises(UserError) as e:
        trace.loads(text)
    assert sentence in str(e.value) and str(e.value).startswith("Line ")


def test_good_counts_read():
    start = _start({"layers": 2, "num_experts": 8, "top_k": 2, "counted": True})
    events = trace.loads("\n".join([start, _step(experts_per_layer=[8, 7])]))
    assert events[1].experts_per_layer == (8, 7) and events[0].settings["experts"]["top_k"] == 2
    assert trace.loads(_start({}))[0].settings["experts"] == {}
