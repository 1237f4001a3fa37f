"""Experts touched (engine.experts): each step's distinct experts per mixture-of-experts
layer, counted on request through hooks on transformers' own router.

What is checked: the counts equal those of a fresh forward, without any cache, over the
same token ids at the same positions (the hook here is the test's own, not the tap's);
counting changes no token; nothing is hooked when it is off, and the hooks go with the
run; a dense target is refused."""
import pytest
import torch
from transformers import Gemma4ForCausalLM
from transformers.models.gemma4.modeling_gemma4 import Gemma4TextRouter

from factories import MOE, ScriptDrafter, gemma_assistant, gemma_multimodal, gemma_target, gemma_text_config
from invariants import check_invariants, generated
from mtp_viz.engine.decoding import Sampling
from mtp_viz.engine.drafters import drafter_class
from mtp_viz.engine.events import Drafted, Start, Step
from mtp_viz.engine.experts import ExpertTap, moe_shape
from mtp_viz.engine.loop import autoregressive, speculative

V, WINDOW, N = 512, 16, 24
PROMPT = torch.randint(3, V, (30,), generator=torch.Generator().manual_seed(11)).tolist()  # > the window


def moe_text_only(seed=0):
    torch.manual_seed(seed)
    return Gemma4ForCausalLM(gemma_text_config(V, WINDOW, **MOE)).eval()


@pytest.fixture(scope="module", params=["multimodal", "text-only"])
def target(request):
    """The 26B-A4B's class (the multimodal wrapper) and a text-only MoE model."""
    return gemma_multimodal(V, WINDOW, moe=True) if request.param == "multimodal" else moe_text_only()


@pytest.fixture(scope="module")
def reference(target):
    ids = torch.tensor([PROMPT])
    return target.generate(ids, do_sample=False, max_new_tokens=N, pad_token_id=0)[0, len(PROMPT):].tolist()


def fresh_counts(target, sequence: list[int], last: int) -> tuple[int, ...]:
    """Distinct experts per layer of the last ``last`` positions of ``sequence``, from one
    forward over the whole sequence without a cache (the router's own top_k_index)."""
    seen = []
    hooks = [m.register_forward_hook(lambda mod, args, out: seen.append(out[2]))
             for m in target.get_decoder().modules() if isinstance(m, Gemma4TextRouter)]
    try:
        with torch.inference_mode():
            target(input_ids=torch.tensor([sequence]), use_cache=False)
    finally:
        for h in hooks:
            h.remove()
    return tuple(int(index[-last:].unique().numel()) for index in seen)


def forwards(events):
    """Each step's forward as (its step event, the sequence it ran over, how many new tokens)."""
    ids, drafts, new, out = list(events[0].prompt_ids), [], [], []
    for e in events[1:]:
        if isinstance(e, Drafted):
            drafts.append(e.token_id)
        elif e.type in ("accepted", "bonus", "token"):
            new.append(e.token_id)
        elif isinstance(e, Step):  # its forward ran over the sequence as it stood before it
            fed = len(ids) if e.step == 1 else 1 + len(drafts)  # the newest token and the drafts
            out.append((e, ids + drafts, fed))
            ids, drafts, new = ids + new, [], []
    return out


def mtp(target):
    return drafter_class("mtp").build(target, gemma_assistant(V, WINDOW))


@pytest.mark.parametrize("drafter", ["script", "mtp"])
def test_each_steps_experts_are_those_of_a_fresh_forward(target, reference, drafter):
    """Speculative (a drafter mostly right, heuristic draft lengths 1 to 8; and the random
    MTP drafter) and autoregressive: every step's counts, prefill included."""
    d = ScriptDrafter(len(PROMPT), reference, wrong_every=3, vocab=V) if drafter == "script" else mtp(target)
    runs = [list(speculative(target, d, PROMPT, max_new_tokens=N, schedule="heuristic", draft_tokens=2,
                             max_draft_tokens=8, experts=True)),
            list(autoregressive(target, PROMPT, max_new_tokens=8, experts=True))]
    for events in runs:
        check_invariants(events, N)
        assert events[0].settings["experts"] == {"layers": 4, "num_experts": 8, "top_k": 2, "counted": True}
        steps = forwards(events)
        for step, sequence, fed in steps:
            assert len(step.experts_per_layer) == 4
            assert step.experts_per_layer == fresh_counts(target, sequence, fed), step.step
        # one token goes to exactly top_k experts per layer; more tokens to at most k·tokens
        assert all(2 <= n <= min(8, 2 * fed) for step, _, fed in steps for n in step.experts_per_layer)
    lengths = {s.draft_tokens for s, _, _ in forwards(runs[0])}
    assert 0 in lengths and len(lengths - {0}) >= 2  # the prefill and verifications of several lengths
    assert all(s.experts_per_layer == (2, 2, 2, 2) for s, _, _ in forwards(runs[1])[1:])


@pytest.mark.parametrize("sampling", [Sampling(), Sampling(0.9, 0, 1.0, 5)], ids=["greedy", "sampled"])
def test_counting_changes_no_token(target, reference, sampling):
    for run in (lambda on: speculative(target, mtp(target), PROMPT, max_new_tokens=N, sampling=sampling,
                                       experts=on),
                lambda on: speculative(target, ScriptDrafter(len(PROMPT), reference, 3, V), PROMPT,
                                       max_new_tokens=N, sampling=sampling, experts=on),
                lambda on: autoregressive(target, PROMPT, max_new_tokens=N, sampling=sampling, experts=on)):
        off, on = list(run(False)), list(run(True))
        assert generated(on) == generated(off)
        assert [(e.type, getattr(e, "token_id", None)) for e in on] == [(e.type, getattr(e, "token_id", None))
                                                                        for e in off]
        assert all(s.experts_per_layer == () for s in off if isinstance(s, Step))
        assert all(s.experts_per_layer for s in on if isinstance(s, Step))
        assert off[0].settings["experts"]["counted"] is False and on[0].settings["experts"]["counted"] is True


def hooks(target) -> int:
    """The tap's hooks on the target's routers (transformers adds output-capturing hooks
    of its own the first time a forward asks for hidden states: those are not counted)."""
    return sum(getattr(h, "__module__", "") == "mtp_viz.engine.experts"
               for m in target.modules() if isinstance(m, Gemma4TextRouter) for h in m._forward_hooks.values())


def test_nothing_is_hooked_unless_asked_and_the_hooks_go_with_the_run(target):
    assert hooks(target) == 0
    run = speculative(target, mtp(target), PROMPT, max_new_tokens=8)
    next(run), next(run)  # the prefill ran
    assert hooks(target) == 0
    run = autoregressive(target, PROMPT, max_new_tokens=8, experts=True)
    next(run), next(run)
    assert hooks(target) == 4  # one per router while counting
    list(run)  # finished: the generator's frame, and the tap with it, are gone
    assert hooks(target) == 0
    half = speculative(target, mtp(target), PROMPT, max_new_tokens=8, experts=True)
    next(half), next(half)
    assert hooks(target) == 4
    half.close()  # a run abandoned half-way (a closed browser tab)
    del half
    assert hooks(target) == 0


def test_two_counting_runs_taking_turns_keep_their_own_counts(target, reference):
    """The app's two modes take turns on one thread, each with its own tap on the same model."""
    spec = speculative(target, ScriptDrafter(len(PROMPT), reference, 3, V), PROMPT, max_new_tokens=N,
                       experts=True)
    ar = autoregressive(target, PROMPT, max_new_tokens=N, experts=True)
    alone_spec = list(speculative(target, ScriptDrafter(len(PROMPT), reference, 3, V), PROMPT,
                                  max_new_tokens=N, experts=True))
    alone_ar = list(autoregressive(target, PROMPT, max_new_tokens=N, experts=True))
    mixed = {"spec": [], "ar": []}
    for a, b in zip(spec, ar):
        mixed["spec"].append(a)
        mixed["ar"].append(b)
    mixed["spec"] += list(spec)
    mixed["ar"] += list(ar)
    counts = lambda events: [e.experts_per_layer for e in events if isinstance(e, Step)]  # noqa: E731
    assert counts(mixed["spec"]) == counts(alone_spec) and counts(mixed["ar"]) == counts(alone_ar)


def test_a_dense_target_has_no_experts_to_count():
    dense = gemma_target(V, WINDOW)
    assert moe_shape(dense) == {}
    with pytest.raises(ValueError, match="no mixture-of-experts router"):
        ExpertTap(dense)
    events = list(autoregressive(dense, PROMPT, max_new_tokens=2))
    assert isinstance(events[0], Start) and events[0].settings["experts"] == {}
    assert "experts_per_layer" not in [e for e in events if isinstance(e, Step)][0].to_dict()
