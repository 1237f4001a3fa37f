"""Reading a llama.cpp server, without one: the step rebuild from running draft counts, and
the sentences for servers that are not what they claim (real HTTP servers on 127.0.0.1,
tests/hostile.py). The real llama-server is in tests/sources/test_llamacpp_server.py."""
import json
import tracemalloc

import pytest

from hostile import SECRET, closed_url, serving
from mtp_viz.engine.events import Bonus, Done, Start, Step
from mtp_viz.errors import UserError
from mtp_viz.sources import open_source
from mtp_viz.sources.llamacpp import stream
from mtp_viz.sources.served import Mismatch
from mtp_viz.sources.settings import RunSettings

PROPS = {"default_generation_settings": {"params": {}, "n_ctx": 1024}, "build_info": "b0",
         "model_path": SECRET, "total_slots": 1}
SLOTS = [{"id": 0, "n_ctx": 1024, "speculative": True}]


@pytest.fixture
def serve():
    with serving() as start:
        yield start


def chunk(token, n, drafted=0, accepted=0, text="x"):
    timings = {"predicted_n": n, **({"draft_n": drafted, "draft_n_accepted": accepted} if drafted else {})}
    return {"index": 0, "content": text, "tokens": [token], "stop": False, "tokens_predicted": n, "timings": timings}


def sse(chunks) -> str:
    return "".join(f"data: {json.dumps(c)}\n\n" for c in chunks)


def llama(routes_extra=None, completion=None):
    """The routes of a server that answers as llama.cpp does (its /props, /slots, /tokenize)."""
    routes = {"/props": json.dumps(PROPS), "/slots": json.dumps(SLOTS),
              "/tokenize": json.dumps({"tokens": [2, 10, 11]}),
              "/completion": completion if completion is not None else ""}
    return {**routes, **(routes_extra or {})}


# -------------------------------------------------------------- the rebuild

def test_each_rise_of_the_counts_is_one_step_with_its_tokens():
    # prefill token; a step that kept 2 of 4 (3 tokens); one that kept 0 of 4 (1 token);
    # a token with the counts unchanged: a step without drafts; a step cut after 1 of its 3 tokens
    counts = [(0, 0), (4, 2), (4, 2), (4, 2), (8, 2), (8, 2), (12, 4)]
    assert stream.rebuild(counts) == ([2, 0, 0, 2], [4, 4, 0, 4])


@pytest.mark.parametrize("counts", [
    [(0, 0), (4, 2), (3, 2)],          # drafted falls
    [(0, 0), (4, 2), (4, 3)],          # accepted rises without a verification
    [(0, 0), (4, 2), (4, 2), (8, 3)],  # a step's second token with the next step's counts
    [(0, 0), (300, 0)],                # more drafts in one step than any server drafts
])
def test_counts_that_do_not_add_up_are_refused(counts):
    with pytest.raises(Mismatch):
        stream.rebuild(counts)


def test_a_stream_becomes_the_engines_events_and_its_counts_sum_to_the_servers():
    chunks = [chunk(5, 1), chunk(6, 2, 4, 2), chunk(7, 3, 4, 2), chunk(8, 4, 4, 2), chunk(9, 5, 8, 2),
              {"stop": True, "stop_type": "limit", "tokens": [], "content": "", "tokens_predicted": 5}]
    events = list(stream.assemble([(0.01 * i, c) for i, c in enumerate(chunks, 1)], 0.0, "speculative", (2, 3),
                                  {"server": "http://s", "max_new_tokens": 5}))
    steps = [e for e in events if isinstance(e, Step)]
    done = events[-1]
    assert isinstance(events[0], Start) and events[0].ran.engine == "llamacpp" and not events[0].ran.rejected_ids
    assert [(s.draft_tokens, s.accepted, s.new_tokens) for s in steps] == [(0, 0, 1), (4, 2, 3), (4, 0, 1)]
    assert isinstance(done, Done) and done.generated_ids == (5, 6, 7, 8, 9) and done.stop_reason == "max_new_tokens"
    assert (done.drafted, done.accepted) == (8, 2)   # the server's last draft_n and draft_n_accepted
    assert [e.kind for e in events if isinstance(e, Bonus)] == ["extension", "correction", "correction"]


def test_tokens_held_back_and_sent_without_their_ids_end_the_run_in_one_sentence():
    chunks = [chunk(5, 1), chunk(6, 3, 4, 1)]   # two tokens counted, one named
    with pytest.raises(UserError, match="several tokens as one piece of text"):
        list(stream.assemble([(0.1, c) for c in chunks], 0.0, "speculative", (2,),
                             {"server": "http://s", "max_new_tokens": 8}))


# -------------------------------------------------------------- servers that are not llama.cpp

def run(url, mode="autoregressive", n=4):
    return list(open_source(server=url).runs(RunSettings("def f(x):", modes=(mode,), max_new_tokens=n, chat=False)))


def test_a_dead_port_is_one_sentence():
    url = closed_url()
    with pytest.raises(UserError) as e:
        run(url)
    assert str(e.value) == f"No server answers at {url}; start vLLM or llama.cpp there or check the address."


def test_a_server_that_is_neither_is_one_sentence_that_quotes_nothing(serve):
    _, url = serve({"/": "<html>hello</html>"})
    with pytest.raises(UserError) as e:
        run(url)
    assert "is not a vLLM server" in str(e.value) and SECRET not in str(e.value)


def test_a_llama_server_that_does_not_speculate_is_told_so(serve):
    _, url = serve(llama({"/slots": json.dumps([{"id": 0, "n_ctx": 1024, "speculative": False}])}))
    with pytest.raises(UserError, match="does not speculate; start llama-server with a drafter"):
        run(url, "speculative")


def test_a_flooding_server_is_cut_before_its_bytes_are_held(serve):
    """100,000 tokens for a 4-token request: one sentence, and the client holds a few
    MiB at most (the stream is capped by the tokens asked for)."""
    flood = sse(chunk(7, i + 1) for i in range(100_000))
    server, url = serve(llama(completion=flood))
    tracemalloc.start()
    with pytest.raises(UserError) as e:
        run(url)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert "more than the 4 tokens asked for" in str(e.value) or "more than mtp-viz reads" in str(e.value)
    assert peak < 24 * 2**20   # the flood is ~9 MB of text; far less of it is ever read


def test_the_model_path_in_props_is_never_in_a_sentence(serve):
    _, url = serve(llama(completion=sse([{"error": {"message": SECRET}}])))
    with pytest.raises(UserError) as e:
        run(url)
    assert SECRET not in str(e.value)
