"""Top candidates recorded on request (``top=k``): each list equals torch.topk of the
distribution the decision used, recomputed here independently with a fresh forward."""
import json

import pytest
import torch

from factories import ScriptDrafter, gemma_assistant, gemma_target, greedy_reference
from mtp_viz.engine.decoding import Sampling
from mtp_viz.engine.drafters.lookup import PromptLookupDrafter
from mtp_viz.engine.drafters.mtp import MTPDrafter
from mtp_viz.engine.events import Accepted, Bonus, Drafted, Rejected, Token, event_from_dict
from mtp_viz.engine.loop import autoregressive, speculative
from mtp_viz.engine.sampling import Sampler
from mtp_viz.errors import UserError
from mtp_viz.sources import trace

V, WINDOW, K = 512, 16, 5
N = 30
SETTINGS = [Sampling(), Sampling(temperature=0.7, seed=3), Sampling(temperature=1.3, top_k=20, top_p=0.9, seed=4)]


@pytest.fixture(scope="module")
def target():
    return gemma_target(V, WINDOW, sharpen=3.0)


@pytest.fixture(scope="module")
def prompt():
    g = torch.Generator().manual_seed(11)
    return torch.randint(3, V, (24,), generator=g).tolist()  # longer than the sliding window


def contexts(prompt, events):
    """(event, the ids it was decided after) for every accepted/rejected/bonus/token event."""
    ids, drafts, base, out = list(prompt), {}, {}, []
    for e in events:
        if isinstance(e, Drafted):
            drafts.setdefault(e.step, []).append(e.token_id)
        elif isinstance(e, (Accepted, Rejected, Bonus)):
            base.setdefault(e.step, list(ids))  # the text before the step's first verdict
            out.append((e, base[e.step] + drafts.get(e.step, [])[:e.index]))
        elif isinstance(e, Token):
            out.append((e, list(ids)))
        if isinstance(e, (Accepted, Bonus, Token)):
            ids.append(e.token_id)
    return out


@torch.inference_mode()
def processed(target, ctx, sampling):
    """The target's processed distribution after ``ctx``, from a fresh cacheless forward."""
    logits = target(input_ids=torch.tensor([ctx])).logits[0, -1:].float()
    return Sampler(sampling).probs(logits)[0]


def check_top(ids, probs, dist):
    """Recorded (ids, probs) equal torch.topk(dist, K); ids only where p > 0 (zeros tie)."""
    want = torch.topk(dist, K)
    assert list(probs) == pytest.approx(want.values.tolist(), abs=2e-5)
    for got, w, p in zip(ids, want.indices.tolist(), want.values.tolist()):
        if p > 1e-4:
            assert got == w
        else:
            assert dist[got] <= 1e-4


@pytest.mark.parametrize("sampling", SETTINGS, ids=["greedy", "temperature", "top-k-top-p"])
def test_recorded_p_top_equals_topk_of_the_processed_target_distribution(target, prompt, sampling):
    drafter = MTPDrafter(gemma_assistant(V, WINDOW), target)
    events = list(speculative(target, drafter, prompt, max_new_tokens=N, sampling=sampling,
                              draft_tokens=3, top=K))
    checked = contexts(prompt, events)
    assert sum(isinstance(e, Rejected) for e, _ in checked) > 0
    for e, ctx in checked:
        assert len(e.p_top_ids) == K
        check_top(e.p_top_ids, e.p_top, processed(target, ctx, sampling))
    for d in (e for e in events if isinstance(e, Drafted)):
        assert len(d.q_top_ids) == K and list(d.q_top) == sorted(d.q_top, reverse=True)
        if d.token_id in d.q_top_ids:  # the draft's own q is the same number
            assert d.q_top[d.q_top_ids.index(d.token_id)] == pytest.approx(d.q, abs=1e-5)
        if sampling.greedy:  # greedy drafts are the drafter's argmax
            assert d.q_top_ids[0] == d.token_id


def test_autoregressive_tokens_carry_the_top_of_p(target, prompt):
    sampling = SETTINGS[2]
    events = list(autoregressive(target, prompt, max_new_tokens=12, sampling=sampling, top=K))
    for e, ctx in contexts(prompt, events):
        check_top(e.p_top_ids, e.p_top, processed(target, ctx, sampling))


def test_a_correction_under_sampling_carries_the_residual_it_was_drawn_from(target, prompt):
    """A scripted drafter is certain (q = one-hot of its draft), so the residual after a
    rejection is p with the draft's mass removed, renormalized."""
    sampling = SETTINGS[1]
    script = torch.randint(3, V, (N,), generator=torch.Generator().manual_seed(5)).tolist()
    events = list(speculative(target, ScriptDrafter(len(prompt), script), prompt, max_new_tokens=N,
                              sampling=sampling, draft_tokens=3, top=K))
    corrections = [(e, ctx) for e, ctx in contexts(prompt, events)
                   if isinstance(e, Bonus) and e.kind == "correction"]
    assert corrections
    for bonus, ctx in corrections:
        rejected = next(e for e in events if isinstance(e, Rejected) and e.step == bonus.step
                        and e.index == bonus.index)
        r = processed(target, ctx, sampling).clone()
        r[rejected.token_id] = 0.0
        check_top(bonus.residual_top_ids, bonus.residual_top, r / r.sum())
        assert rejected.token_id not in bonus.residual_top_ids
    extensions = [e for e in events if isinstance(e, Bonus) and e.kind == "extension"]
    assert all(not e.residual_top_ids for e in extensions)


def test_mtp_rejections_under_sampling_record_a_residual_and_greedy_ones_none(target, prompt):
    for sampling, want in ((SETTINGS[1], True), (Sampling(), False)):
        drafter = MTPDrafter(gemma_assistant(V, WINDOW), target)
        events = list(speculative(target, drafter, prompt, max_new_tokens=N, sampling=sampling, top=K))
        corrections = [e for e in events if isinstance(e, Bonus) and e.kind == "correction"]
        assert corrections and all(bool(e.residual_top_ids) == want for e in corrections)


def test_greedy_output_is_unchanged_with_top_on(target, prompt):
    reference = greedy_reference(target, prompt, N)
    for make in (lambda: MTPDrafter(gemma_assistant(V, WINDOW), target), PromptLookupDrafter):
        off = list(speculative(target, make(), prompt, max_new_tokens=N, draft_tokens=4))
        on = list(speculative(target, make(), prompt, max_new_tokens=N, draft_tokens=4, top=K))
        assert list(on[-1].generated_ids) == list(off[-1].generated_ids) == reference
        kinds = [(e.type, getattr(e, "token_id", None), getattr(e, "p", None)) for e in off]
        assert [(e.type, getattr(e, "token_id", None), getattr(e, "p", None)) for e in on] == kinds


def test_clustered_head_records_its_clusters_and_whether_the_target_token_was_in_them(target, prompt):
    assistant = gemma_assistant(V, WINDOW, ordered=True)
    head = assistant.masked_embedding
    members = head.token_ordering.view(head.num_centroids, head.vocab_size_per_centroid)
    events = list(speculative(target, MTPDrafter(assistant, target), prompt, max_new_tokens=N, top=K))
    drafted = {(e.step, e.index): e for e in events if isinstance(e, Drafted)}
    for d in drafted.values():
        assert len(d.clusters) == head.centroid_intermediate_top_k == len(set(d.clusters))
        candidates = set(members[list(d.clusters)].flatten().tolist())
        assert d.token_id in candidates and set(d.q_top_ids) <= candidates  # real logits beat the floor
    rejected = [e for e in events if isinstance(e, Rejected)]
    assert rejected
    for e in rejected:
        candidates = set(members[list(drafted[e.step, e.index].clusters)].flatten().tolist())
        assert e.target_in_clusters == ("yes" if e.p_top_ids[0] in candidates else "no")
    # no clustered head, or nothing recorded: the field stays empty
    plain = list(speculative(target, MTPDrafter(gemma_assistant(V, WINDOW), target), prompt,
                             max_new_tokens=N, top=K))
    assert all(not e.target_in_clusters for e in plain if isinstance(e, Rejected))
    assert all(not e.clusters for e in plain if isinstance(e, Drafted))


def test_the_cluster_hook_goes_with_its_run(target, prompt):
    assistant = gemma_assistant(V, WINDOW, ordered=True)
    run = speculative(target, MTPDrafter(assistant, target), prompt, max_new_tokens=N, top=K)
    next(run), next(run)
    assert len(assistant.masked_embedding.centroids._forward_hooks) == 1
    run.close()
    del run
    assert len(assistant.masked_embedding.centroids._forward_hooks) == 0


def test_top_fields_round_trip_and_stay_out_of_json_when_off(target, prompt):
    drafter = MTPDrafter(gemma_assistant(V, WINDOW), target)
    on = list(speculative(target, drafter, prompt, max_new_tokens=12, sampling=SETTINGS[1], top=K))
    assert all(event_from_dict(json.loads(json.dumps(e.to_dict()))) == e for e in on)
    assert trace.loads(trace.dumps(on)) == on
    off = list(speculative(target, drafter, prompt, max_new_tokens=12))
    assert not any("_top" in k or k in ("clusters", "target_in_clusters") for e in off for k in e.to_dict())


def test_old_traces_still_read_and_a_mistyped_top_field_is_one_sentence():
    for path in trace.examples_dir().glob("*.jsonl"):  # recorded before these fields existed
        assert all(not getattr(e, "p_top", ()) for e in trace.read(path))
    bad = ('{"type": "start", "mode": "autoregressive", "prompt_tokens": 1}\n'
           '{"type": "token", "step": 1, "token_id": 5, "p_top": ["x"]}\n')
    with pytest.raises(UserError, match="Line 2 .* wrong type"):
        trace.loads(bad)


def test_pair_generate_checks_top():
    from factories import word_tokenizer
    from mtp_viz.sources.pair import ModelPair
    pair = ModelPair(gemma_target(V, WINDOW), None, word_tokenizer(V), "t", None, "cpu")
    for bad in (-1, 51, 2.5, True):
        with pytest.raises(UserError, match="Top candidates"):
            pair.generate("w10 w11", top=bad, chat=False)
    events = list(pair.generate("w10 w11", mode="autoregressive", max_new_tokens=3, top=3, chat=False))
    assert all(len(e.p_top_text) == 3 for e in events if isinstance(e, Token))
