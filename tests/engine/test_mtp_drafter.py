"""The MTP drafter is fed exactly as transformers feeds it: same drafts, step by step."""
import pytest
import torch
from transformers.generation import candidate_generator as cg

from factories import gemma_assistant, gemma_target
from mtp_viz.engine.drafters.mtp import MTPDrafter
from mtp_viz.engine.events import Drafted
from mtp_viz.engine.loop import speculative

V, WINDOW = 512, 64  # the whole run fits in the window, where transformers crops like us


def transformers_drafts(target, assistant, prompt, n, monkeypatch):
    """Run target.generate(assistant_model=...) and record each step's candidates."""
    seen = []
    original = cg.SinglePositionMultiTokenCandidateGenerator.get_candidates

    def record(self, input_ids, *args, **kwargs):
        cand, logits = original(self, input_ids, *args, **kwargs)
        if cand.shape[1] > input_ids.shape[1]:
            seen.append(cand[0, input_ids.shape[1]:].tolist())
        return cand, logits

    monkeypatch.setattr(cg.SinglePositionMultiTokenCandidateGenerator, "get_candidates", record)
    out = target.generate(torch.tensor([prompt]), assistant_model=assistant, do_sample=False,
                          max_new_tokens=n, eos_token_id=None, pad_token_id=0)
    return seen, out[0, len(prompt):].tolist()


def our_drafts(events):
    steps = {}
    for e in events:
        if isinstance(e, Drafted):
            steps.setdefault(e.step, []).append(e.token_id)
    return [steps[s] for s in sorted(steps)]


@pytest.mark.parametrize("ordered", [False, True])
def test_drafts_equal_transformers(ordered, monkeypatch):
    target = gemma_target(V, WINDOW, seed=11)
    assistant = gemma_assistant(V, WINDOW, seed=12, ordered=ordered, k=3)
    prompt = torch.randint(3, V, (12,), generator=torch.Generator().manual_seed(5)).tolist()
    ref_drafts, ref_ids = transformers_drafts(target, assistant, prompt, 24, monkeypatch)
    events = list(speculative(target, MTPDrafter(assistant, target), prompt, max_new_tokens=24,
                              stale_kv=True))
    assert events[-1].generated_ids == tuple(ref_ids)
    ours = our_drafts(events)
    # Every step drafts exactly what transformers drafts. Only where the token budget
    # ends do the two differ: we never draft past it, transformers does on its last step.
    assert len(ours) in (len(ref_drafts) - 1, len(ref_drafts))
    assert ours[:-1] == ref_drafts[:len(ours) - 1]
    assert ours[-1] == ref_drafts[len(ours) - 1][:len(ours[-1])] and ours[-1]


def test_clean_kv_differs_only_after_a_rejection(monkeypatch):
    target = gemma_target(V, WINDOW, seed=11)
    assistant = gemma_assistant(V, WINDOW, seed=12, k=3)
    prompt = torch.randint(3, V, (12,), generator=torch.Generator().manual_seed(5)).tolist()
    ref_drafts, _ = transformers_drafts(target, assistant, prompt, 24, monkeypatch)
    clean = our_drafts(speculative(target, MTPDrafter(assistant, target), prompt,
                                   max_new_tokens=24))
    assert clean[0] == ref_drafts[0]  # after prefill there is no stale entry to differ by
    assert any(a != b[:len(a)] for a, b in zip(clean[1:], ref_drafts[1:]))
