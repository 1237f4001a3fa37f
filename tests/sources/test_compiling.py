"""sources/compiling.py: a compiled pair compiles every graph a run can meet before its
first token, telling each graph as "k of n", and a run after that compiles nothing.

"Nothing" is counted by dynamo itself (``torch._dynamo.utils.counters``: the graphs it
has built in this process), not only by the engine's own bookkeeping. The pair is a
small random one with a two-layer target, to keep the compiles short; these tests
compile, so they are slow.
"""
import pytest
import torch
from torch._dynamo.utils import counters

from factories import gemma_assistant, gemma_target, word_tokenizer
from mtp_viz.engine import graphs
from mtp_viz.engine.events import Done, Step
from mtp_viz.sources import compiling
from mtp_viz.sources.local import LocalSource
from mtp_viz.sources.models import from_models
from mtp_viz.sources.settings import RunSettings

pytestmark = pytest.mark.slow

PROMPT = " ".join(f"w{i}" for i in range(5, 40))   # 35 words


def built() -> int:
    return counters["stats"]["unique_graphs"]


@pytest.fixture(scope="module")
def pair():
    torch.manual_seed(0)
    return from_models(gemma_target(layers=2), gemma_assistant(k=3), word_tokenizer())


def test_after_compiling_for_a_run_the_run_compiles_nothing(pair):
    s = RunSettings(PROMPT, max_new_tokens=40, chat=False, draft_tokens=3)
    told = []
    assert pair.use("compiled", settings=[s], progress=told.append) == ""
    prompt = len(pair.encode(PROMPT, chat=False))
    planned = graphs.speculative_graphs(prompt, 40, 3, fixed=True) | graphs.autoregressive_graphs(prompt, 40)
    # every graph once, in order, each "k of n"
    assert [(p.index, p.total) for p in told] == [(k, len(planned)) for k in range(1, len(planned) + 1)]
    assert {p.graph for p in told} == planned == set(pair.mounted.graphs())
    assert told[0].left is None and all(p.left is not None and p.left >= 0 for p in told[1:])
    assert compiling.needed(pair, s) == []

    before = built()
    events = list(LocalSource(pair).runs(s))
    assert built() == before                               # dynamo built no graph during the run
    done = [e for _, e in events if isinstance(e, Done)]
    assert [d.compile_seconds for d in done] == [0.0, 0.0]
    assert all(d.seconds > 0 and d.tokens_per_second > 0 for d in done)
    assert all(e.draft_seconds >= 0 and e.verify_seconds >= 0 for _, e in events if isinstance(e, Step))
    assert next(d for m, d in events if m == "speculative" and isinstance(d, Done)).drafted > 0


def test_a_new_prompt_length_compiles_nothing(pair):
    """Issue 40: a compiled pair's first run of a prompt of a new length started only after
    its prefill graph compiled (12 s on the bundled pair). The prompt plans no graph: it
    goes through one that exists, else eagerly, and the tokens are the eager engine's."""
    s = RunSettings(PROMPT, max_new_tokens=40, chat=False, draft_tokens=3)
    pair.use("compiled", settings=[s])
    short = RunSettings("w7 w8 w9 w10 w11 w12 w13", max_new_tokens=40, chat=False, draft_tokens=3)
    assert 5 < len(pair.encode(short.prompt, chat=False)) <= 9   # its width, 9, no verification's
    assert compiling.needed(pair, short) == []
    before = built()
    done = [e for _, e in LocalSource(pair).runs(short) if isinstance(e, Done)]
    assert built() == before and [d.compile_seconds for d in done] == [0.0, 0.0]
    eager = [e for _, e in LocalSource(from_models(pair.target, pair.drafter_model, pair.tokenizer)).runs(short)
             if isinstance(e, Done)]
    assert [d.generated_ids for d in done] == [d.generated_ids for d in eager]


def test_a_run_with_new_shapes_compiles_them_before_its_first_token(pair):
    """An adaptive schedule can draft any length up to 16: every width but the constant
    schedule's 5 (compiled above) is compiled by the run's own preparation, before the loop
    starts, and never inside it."""
    s = RunSettings(PROMPT, max_new_tokens=40, chat=False, schedule="heuristic", modes=("speculative",))
    missing = compiling.needed(pair, s)
    assert missing == [graphs.Graph("verify", 256, w) for w in (1, 2, 3, 9, 17)]
    told = []
    assert compiling.prepare(pair, [s], progress=told.append) > 0
    assert [(p.index, p.total, p.graph) for p in told] == [(i + 1, 5, g) for i, g in enumerate(missing)]
    assert told[1].left is not None          # estimated from what the first one took
    before = built()
    done = [e for _, e in LocalSource(pair).runs(s) if isinstance(e, Done)]
    assert built() == before and done[0].compile_seconds == 0.0 and done[0].seconds > 0
    assert compiling.prepare(pair, [s]) == 0.0   # nothing left to do
