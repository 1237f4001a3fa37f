"""Greedy parity with transformers, event invariants, cuts at EOS and the token limit."""
import json

import pytest
import torch

from factories import ScriptDrafter, gemma_assistant, gemma_small_lm, gemma_target, greedy_reference, llama
from invariants import check_invariants, generated
from mtp_viz.engine.drafters.lookup import PromptLookupDrafter
from mtp_viz.engine.drafters.model import ModelDrafter
from mtp_viz.engine.drafters.mtp import MTPDrafter
from mtp_viz.engine.events import Accepted, Bonus, Event, Step, Token, event_from_dict
from mtp_viz.engine.loop import autoregressive, speculative
from mtp_viz.engine.schedules import make_schedule

V, WINDOW = 512, 16
N = 40


@pytest.fixture(scope="module")
def target():
    return gemma_target(V, WINDOW)


@pytest.fixture(scope="module")
def prompt():
    g = torch.Generator().manual_seed(7)
    # longer than the sliding window, with a repeated stretch for prompt lookup to find
    base = torch.randint(3, V, (20,), generator=g).tolist()
    return base + base[:10] + torch.randint(3, V, (6,), generator=g).tolist()


@pytest.fixture(scope="module")
def reference(target, prompt):
    return greedy_reference(target, prompt, N)


def make_drafter(kind, target, prompt, reference):
    if kind == "mtp":
        return MTPDrafter(gemma_assistant(V, WINDOW), target)
    if kind == "mtp_ordered":
        return MTPDrafter(gemma_assistant(V, WINDOW, ordered=True), target)
    if kind == "model":
        return ModelDrafter(gemma_small_lm(V, WINDOW))
    if kind == "lookup":
        return PromptLookupDrafter()
    if kind == "script":
        return ScriptDrafter(len(prompt), reference, wrong_every=3, vocab=V)
    raise AssertionError(kind)


@pytest.mark.parametrize("kind", ["mtp", "mtp_ordered", "model", "lookup", "script"])
@pytest.mark.parametrize("schedule", ["constant", "heuristic", "heuristic_transient", "confidence"])
def test_greedy_parity(kind, schedule, target, prompt, reference):
    drafter = make_drafter(kind, target, prompt, reference)
    events = list(speculative(target, drafter, prompt, max_new_tokens=N, schedule=schedule,
                              draft_tokens=3))
    assert generated(events) == reference
    steps = check_invariants(events, N)
    assert events[-1].new_tokens == N and events[-1].stop_reason == "max_new_tokens"
    if kind == "script":  # a drafter that is mostly right saves target forwards
        assert len(steps) < N / 2
        assert any(isinstance(e, Bonus) and e.kind == "correction" for e in events)
        assert any(isinstance(e, Bonus) and e.kind == "extension" and e.index > 0 for e in events)


def test_autoregressive_parity(target, prompt, reference):
    events = list(autoregressive(target, prompt, max_new_tokens=N))
    assert generated(events) == reference
    check_invariants(events, N)
    assert events[-1].target_forwards == N


def test_independent_non_gemma_drafter():
    tgt, small = llama(V, 64, 2, seed=3), llama(V, 32, 1, seed=4)
    prompt = list(range(10, 40))
    ref = greedy_reference(tgt, prompt, 30)
    for schedule in ("constant", "heuristic"):
        events = list(speculative(tgt, ModelDrafter(small), prompt, max_new_tokens=30,
                                  schedule=schedule))
        assert generated(events) == ref
        check_invariants(events, 30)
    # the same model as its own drafter is always right: every draft accepted
    events = list(speculative(tgt, ModelDrafter(tgt), prompt, max_new_tokens=30))
    done = events[-1]
    assert generated(events) == ref and done.accepted == done.drafted > 0


@pytest.mark.parametrize("eos_at", [2, 5, 9])
def test_eos_inside_a_step(target, prompt, reference, eos_at):
    eos = reference[eos_at]
    first = reference.index(eos)  # the reference stops at the first occurrence
    ref = greedy_reference(target, prompt, N, eos=eos)
    assert ref == reference[:first + 1]
    drafter = ScriptDrafter(len(prompt), reference)
    events = list(speculative(target, drafter, prompt, max_new_tokens=N, draft_tokens=4,
                              eos_token_ids=[eos]))
    assert generated(events) == ref
    check_invariants(events, N)
    assert events[-1].stop_reason == "eos"
    last = [e for e in events if isinstance(e, Step)][-1]
    # the step produced its agreed drafts plus the target's token; an EOS before the last
    # of them cuts the rest, and only then is the step marked as cut
    assert last.cut == ("eos" if last.new_tokens < last.agreed + 1 else "")
    assert last.accepted == min(last.agreed, last.new_tokens)
    assert last.accepted == sum(isinstance(e, Accepted) and e.step == last.step for e in events)


@pytest.mark.parametrize("limit", [1, 2, 6, 7])
def test_token_limit_inside_a_step(target, prompt, reference, limit):
    drafter = ScriptDrafter(len(prompt), reference)
    events = list(speculative(target, drafter, prompt, max_new_tokens=limit, draft_tokens=4))
    assert generated(events) == reference[:limit]
    check_invariants(events, limit)
    assert events[-1].new_tokens == limit


def test_stale_kv_switch_keeps_output(target, prompt, reference):
    drafter = MTPDrafter(gemma_assistant(V, WINDOW), target)
    a = list(speculative(target, drafter, prompt, max_new_tokens=N, stale_kv=True))
    assert generated(a) == reference


def test_events_round_trip_json(target, prompt, reference):
    from factories import word_tokenizer
    from mtp_viz.engine.text import Detokenizer
    detok = Detokenizer(word_tokenizer(V))
    drafter = ScriptDrafter(len(prompt), reference, wrong_every=2, vocab=V)
    events = list(speculative(target, drafter, prompt, max_new_tokens=12, detok=detok))
    assert {e.type for e in events} >= {"start", "drafted", "accepted", "rejected", "bonus",
                                        "step", "done"}
    for e in events:
        line = json.dumps(e.to_dict())
        back = event_from_dict(json.loads(line))
        assert back == e and isinstance(back, Event)
    assert events[-1].text.strip() == detok.decode(list(events[-1].generated_ids)).strip()
    pieces = "".join(e.text for e in events if isinstance(e, (Accepted, Bonus)))
    assert pieces.strip() == events[-1].text.strip()


def test_stop_event_ends_generation(target, prompt):
    import threading
    stop = threading.Event()
    gen = autoregressive(target, prompt, max_new_tokens=N, stop=stop)
    seen = []
    for e in gen:
        seen.append(e)
        if isinstance(e, Token) and e.step == 3:
            stop.set()
    assert seen[-1].stop_reason == "stopped" and seen[-1].new_tokens == 3


def test_heuristic_schedule_grows_and_shrinks(target, prompt, reference):
    # all drafts right: 2, 4, 6, ... capped
    right = ScriptDrafter(len(prompt), reference)
    sched = make_schedule("heuristic", initial=2, cap=7)
    steps = [e for e in speculative(target, right, prompt, max_new_tokens=N, schedule=sched)
             if isinstance(e, Step)]
    assert [s.draft_tokens for s in steps[1:4]] == [2, 4, 6]
    assert all(s.reason.startswith("all accepted") for s in steps[1:4])
    assert sched.current == 7
    # the heuristic carries over into the next generation with the same schedule object
    first = [e for e in speculative(target, right, prompt, max_new_tokens=N, schedule=sched)
             if isinstance(e, Step)][1]
    assert first.draft_tokens == 7
    # the transient one restarts from the initial length
    sched_t = make_schedule("heuristic_transient", initial=2, cap=7)
    for _ in range(2):
        first = [e for e in speculative(target, right, prompt, max_new_tokens=N, schedule=sched_t)
                 if isinstance(e, Step)][1]
        assert first.draft_tokens == 2
    # always wrong: shrinks to the floor of 1
    wrong = ScriptDrafter(len(prompt), [(t + 1) % V for t in reference])
    steps = [e for e in speculative(target, wrong, prompt, max_new_tokens=N,
                                    schedule=make_schedule("heuristic", initial=4))
             if isinstance(e, Step)]
    assert [s.draft_tokens for s in steps[1:6]] == [4, 3, 2, 1, 1]


def test_confidence_schedule_stops_at_unsure_token(target, prompt, reference):
    drafter = MTPDrafter(gemma_assistant(V, WINDOW), target)
    # random drafter: every q is far below 0.5, so each step drafts exactly one token
    events = list(speculative(target, drafter, prompt, max_new_tokens=20,
                              schedule=make_schedule("confidence", initial=5, threshold=0.5)))
    drafted_steps = [e for e in events if isinstance(e, Step) and e.step > 1]
    assert drafted_steps and all(s.draft_tokens == 1 for s in drafted_steps[:-1])
    # threshold 0 never stops early: full length
    events = list(speculative(target, drafter, prompt, max_new_tokens=20,
                              schedule=make_schedule("confidence", initial=5, threshold=0.0)))
    assert [e for e in events if isinstance(e, Step)][1].draft_tokens == 5


def test_initial_length_defaults_to_drafter_generation_config(target, prompt):
    assistant = gemma_assistant(V, WINDOW, k=6)
    events = list(speculative(target, MTPDrafter(assistant, target), prompt, max_new_tokens=20))
    assert events[0].settings["draft_tokens"] == 6
    assert [e for e in events if isinstance(e, Step)][1].draft_tokens == 6


def test_prompt_lookup_prefers_a_full_continuation():
    from mtp_viz.engine.drafters.base import DraftContext
    from mtp_viz.engine.drafters.lookup import PromptLookupDrafter
    d = PromptLookupDrafter(max_ngram=2)
    # in a run of repeats the latest match sits right before the tail; an earlier one
    # still has 4 tokens after it
    p = d.propose(DraftContext([9, 9, 9, 9, 9, 9]), 4, None, None)
    assert p.tokens == [9, 9, 9, 9]
    p = d.propose(DraftContext([1, 2, 3, 4, 5, 1, 2, 7, 1, 2]), 3, None, None)
    assert p.tokens == [7, 1, 2]  # the most recent full match wins
    assert d.propose(DraftContext([1, 2, 3]), 3, None, None).tokens == []
