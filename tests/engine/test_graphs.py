"""engine/graphs.py: the graphs a compiled run can meet, worked out from its numbers.

The plan is held against what the loop really asks of the compiled engine: a target and
a draft step that record each call's shape and then run it (eagerly, so nothing compiles
and the test takes seconds), over random prompts, token budgets, draft lengths and
schedules, past the capacities' edges. That a run after compiling the plan compiles
nothing is tests/sources/test_compiling.py's (it compiles, so it is slow).
"""
import pytest
import torch
from hypothesis import HealthCheck, given, settings, strategies as st

from factories import gemma_assistant, gemma_target
from mtp_viz.engine import compiled, graphs, loop
from mtp_viz.engine.drafters.mtp import MTPDrafter
from mtp_viz.engine.graphs import Graph, Progress
from mtp_viz.engine.schedules import SCHEDULES, make_schedule


def test_a_default_run_needs_its_widths_one_capacity_and_one_draft_step():
    # 20 + 64 + 17 positions: the 256 capacity; drafts of 0..4 tokens: widths 1, 2, 3, 5;
    # the prompt has no graph of its own, whatever its length (a new length compiles nothing)
    assert graphs.speculative_graphs(20, 64, 4) == {Graph("verify", 256, w) for w in (1, 2, 3, 5)} | {
        Graph("draft", 256)}
    assert graphs.autoregressive_graphs(20, 64) == {Graph("step", 256)} == graphs.autoregressive_graphs(7, 64)
    assert graphs.speculative_graphs(7, 64, 4) == graphs.speculative_graphs(20, 64, 4)
    # a drafter that reads only tokens: the target's forwards without the state, no draft step
    assert graphs.speculative_graphs(20, 64, 8, state=False, draft=False) == {
        Graph("step", 256, w) for w in (1, 2, 3, 5, 9)}
    # 4 drafts every step (a constant schedule, MTP): the last, shorter steps pad up to 5
    assert graphs.speculative_graphs(20, 64, 4, fixed=True) == {Graph("verify", 256, 5), Graph("draft", 256)}
    assert graphs.speculative_graphs(9, 3, 4, fixed=True) == {Graph("verify", 256, 2), Graph("draft", 256)}


@pytest.mark.parametrize("name, fixed", [("constant", True), ("confidence", False), ("heuristic", False),
                                         ("optimal", False)])
def test_only_the_constant_schedule_drafts_its_longest_every_step(name, fixed):
    assert make_schedule(name, initial=4).fixed is fixed


def test_a_verification_pads_up_to_a_wider_compiled_graph(models):
    _, _, fast, _ = models
    fast.graph.shapes.seconds = {(256, 5, True): 0.0}
    assert [fast.width(256, n, True) for n in (1, 3, 5)] == [5, 5, 5]
    assert fast.width(256, 6, True) == 9          # none holds it: its own width, compiled then
    assert fast.width(256, 1, False) == 1         # another kind of graph: its own
    assert fast.width(256, 6, True, prefill=True) is None   # a prompt that no graph holds: eager
    assert fast.width(512, 3, True, prefill=True) is None
    fast.graph.shapes.seconds = {(256, 2, True): 0.0, (256, 5, True): 0.0}
    assert [fast.width(256, n, True) for n in (1, 2, 3)] == [2, 2, 5]
    fast.graph.shapes.seconds = {}


def test_a_run_across_a_capacity_needs_the_draft_step_at_both():
    plan = graphs.speculative_graphs(200, 100, 16)   # 317 positions: 512; the drafter's K/V grow past 256
    assert {g for g in plan if g.kind == "verify"} == {Graph("verify", 512, w) for w in compiled.WIDTHS}
    assert {g for g in plan if g.kind == "draft"} == {Graph("draft", 256), Graph("draft", 512)}


def test_short_runs_and_runs_past_the_largest_capacity():
    # one token: the prefill alone, which plans no graph
    assert graphs.speculative_graphs(9, 1, 4) == set() == graphs.autoregressive_graphs(9, 1)
    assert graphs.speculative_graphs(9, 2, 4) == {Graph("verify", 256, 1)}  # no room to draft
    assert graphs.speculative_graphs(9, 3, 4) == {Graph("verify", 256, 1), Graph("verify", 256, 2),
                                                  Graph("draft", 256)}
    assert graphs.speculative_graphs(9000, 64, 4) == set()   # eager past 8192 positions, drafter too
    assert graphs.autoregressive_graphs(9000, 64) == set()


@pytest.mark.parametrize("name", list(SCHEDULES))
def test_no_schedule_asks_for_a_draft_longer_than_its_longest(name):
    s = make_schedule(name, initial=3, cap=7)
    lengths = [s.start()]
    for i in range(60):
        drafted = lengths[-1]
        lengths.append(s.update(drafted=drafted, accepted=drafted if i % 5 else 0,
                                draft_seconds=0.001 * drafted, verify_seconds=0.01 + 0.001 * drafted)[0])
    assert max(lengths) <= s.longest and s.longest == (7 if s.adapts else 3)


def test_progress_says_which_graph_of_how_many_and_how_long_is_left():
    g = Graph("verify", 256, 5)
    assert Progress(3, 7, g, 40.0, None).line() == (
        "graph 3 of 7: the target over 5 tokens, with the drafter's state (256-position cache); "
        "timing the first graph")
    assert Progress(1, 2, Graph("draft", 512), 0.0, 150.4).line().endswith(
        "the MTP drafter's step (512-position cache); about 2 min 30 s left")
    assert graphs.duration(41.6) == "42 s"


def test_the_estimate_takes_each_sides_mean():
    timed = {Graph("verify", 256, 1): 20.0, Graph("step", 256, 1): 30.0, Graph("draft", 256): 5.0}
    left = [Graph("verify", 256, 2), Graph("draft", 512)]
    assert graphs.estimate(left, timed) == pytest.approx(25.0 + 5.0)
    assert graphs.estimate(left, {Graph("verify", 256, 1): 20.0}) == pytest.approx(40.0)  # no drafter timed yet
    assert graphs.estimate(left, {}) is None


# ---------------------------------------------------------------- the plan against the loop

class Recording(compiled.FastTarget):
    """The compiled target with its graphs switched off (``graph.note``: it runs each forward
    eagerly at the same shapes), recording the graph each call would have used."""

    def __init__(self, model):
        super().__init__(model)
        self.graph.note, self.used = "recording", set()

    def _run(self, kv, tokens, want_state, width, graph, keep=0):
        if graph:
            self.used.add(Graph("verify" if want_state else "step", kv.capacity, width))
        return super()._run(kv, tokens, want_state, width, graph, keep)


class RecordingStep(compiled.FastDraftStep):
    def __init__(self, assistant, window):
        super().__init__(assistant, window)
        self.graph.note, self.used = "recording", set()

    def __call__(self, x, position, inputs):
        capacity = inputs[0][0].shape[2]
        if capacity in compiled.CAPACITIES:
            self.used.add(Graph("draft", capacity))
        return super().__call__(x, position, inputs)


@pytest.fixture(scope="module")
def models():
    target, assistant = gemma_target(), gemma_assistant()
    fast = Recording(target)
    return target, assistant, fast, RecordingStep(assistant, fast.window)


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(prompt=st.one_of(st.integers(1, 40), st.integers(215, 258)), new=st.integers(1, 40),
       k=st.integers(1, 8), schedule=st.sampled_from(["constant", "heuristic", "confidence"]), seed=st.integers(0, 99))
def test_the_plan_holds_every_graph_a_run_asks_for(models, prompt, new, k, schedule, seed):
    target, assistant, fast, step = models
    ids = torch.randint(3, 512, (prompt,), generator=torch.Generator().manual_seed(seed)).tolist()
    sched = make_schedule(schedule, initial=k, cap=loop.MAX_DRAFT_TOKENS)
    plan = graphs.speculative_graphs(prompt, new, sched.longest, fixed=sched.fixed)
    fast.used, step.used = set(), set()
    as_compiled(fast, plan)
    for _ in loop.speculative(fast, MTPDrafter(assistant, target, step), ids, max_new_tokens=new, schedule=sched):
        pass
    assert fast.used | step.used <= plan
    assert bool(fast.used) == (new >= 2)   # every forward after the prompt's is a graph
    fast.used, plan = set(), graphs.autoregressive_graphs(prompt, new)
    as_compiled(fast, plan)
    for _ in loop.autoregressive(fast, ids, max_new_tokens=new):
        pass
    assert fast.used <= plan
    fast.graph.shapes.seconds = {}


def as_compiled(fast, plan) -> None:
    """The recording target picks its widths as if ``plan`` were compiled."""
    fast.graph.shapes.seconds = {(g.capacity, g.width, g.kind == "verify"): 0.0 for g in plan if g.kind != "draft"}
