"""Property tests (hypothesis) over random small Gemma 4 pairs: greedy parity with
transformers and every event invariant, for any config, prompt, draft length, schedule
and drafter; the sampler never crashes on finite settings and refuses the rest with one
sentence."""
from __future__ import annotations

import math

import pytest
import torch
from hypothesis import HealthCheck, given, settings, strategies as st
from transformers import Gemma4AssistantConfig, Gemma4AssistantForCausalLM, Gemma4ForCausalLM, Gemma4TextConfig

from factories import greedy_reference
from invariants import check_invariants, generated
from mtp_viz.engine.decoding import MAX_SEED, Sampling
from mtp_viz.engine.drafters.lookup import PromptLookupDrafter
from mtp_viz.engine.drafters.model import ModelDrafter
from mtp_viz.engine.drafters.mtp import MTPDrafter
from mtp_viz.engine.loop import autoregressive, speculative
from mtp_viz.engine.sampling import Sampler
from mtp_viz.engine.schedules import SCHEDULES

SLOW = settings(max_examples=12, deadline=None, derandomize=True,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


@st.composite
def pairs(draw):
    """A random Gemma 4 target with an MTP assistant, or an independent small LM."""
    V = draw(st.sampled_from([64, 128, 256]))
    layers = draw(st.integers(1, 3))
    window = draw(st.integers(3, 12))
    head = draw(st.sampled_from([8, 16]))
    seed = draw(st.integers(0, 10_000))
    torch.manual_seed(seed)
    types = ["sliding_attention"] * (layers - 1) + ["full_attention"]
    cfg = Gemma4TextConfig(
        vocab_size=V, hidden_size=32, intermediate_size=48, num_hidden_layers=layers,
        num_attention_heads=2, num_key_value_heads=1, head_dim=head, global_head_dim=head,
        vocab_size_per_layer_input=V, hidden_size_per_layer_input=4, sliding_window=window,
        layer_types=types, max_position_embeddings=512, pad_token_id=0, eos_token_id=1, bos_token_id=2)
    target = Gemma4ForCausalLM(cfg).eval()
    with torch.no_grad():  # peakier logits: greedy choices far from numerical ties
        target.lm_head.weight.mul_(8.0)
    kind = draw(st.sampled_from(["mtp", "model", "lookup"]))
    if kind == "mtp":
        d_layers = draw(st.integers(1, 2))
        text = Gemma4TextConfig(
            vocab_size=V, hidden_size=16, intermediate_size=32, num_hidden_layers=d_layers,
            num_attention_heads=2, num_key_value_heads=1, head_dim=head, global_head_dim=head,
            vocab_size_per_layer_input=0, hidden_size_per_layer_input=0, sliding_window=window,
            layer_types=["sliding_attention"] * (d_layers - 1) + ["full_attention"],
            num_kv_shared_layers=d_layers)
        drafter = MTPDrafter(Gemma4AssistantForCausalLM(Gemma4AssistantConfig(
            text_config=text, backbone_hidden_size=32, use_ordered_embeddings=False)).eval(), target)
    elif kind == "model":
        small = Gemma4TextConfig(
            vocab_size=V, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
            num_attention_heads=2, num_key_value_heads=1, head_dim=8, global_head_dim=8,
            vocab_size_per_layer_input=0, hidden_size_per_layer_input=0, sliding_window=window,
            layer_types=["full_attention"], pad_token_id=0, eos_token_id=1, bos_token_id=2)
        drafter = ModelDrafter(Gemma4ForCausalLM(small).eval())
    else:
        drafter = PromptLookupDrafter()
    prompt = draw(st.lists(st.integers(3, V - 1), min_size=1, max_size=30))
    return target, drafter, prompt


@SLOW
@given(pair=pairs(), draft_tokens=st.integers(1, 6), schedule=st.sampled_from(list(SCHEDULES)),
       n=st.integers(1, 24))
def test_greedy_parity_and_invariants_for_any_small_pair(pair, draft_tokens, schedule, n):
    target, drafter, prompt = pair
    reference = greedy_reference(target, prompt, n)
    events = list(speculative(target, drafter, prompt, max_new_tokens=n, schedule=schedule,
                              draft_tokens=draft_tokens))
    assert generated(events) == reference
    check_invariants(events, n)
    ar = list(autoregressive(target, prompt, max_new_tokens=n))
    assert generated(ar) == reference
    check_invariants(ar, n)


finite = st.floats(min_value=1e-3, max_value=1e3, allow_nan=False, allow_infinity=False)


@settings(max_examples=60, deadline=None, derandomize=True)
@given(temperature=finite, top_p=st.floats(min_value=1e-6, max_value=1.0), top_k=st.integers(0, 300),
       seed=st.integers(0, MAX_SEED), logits=st.lists(st.floats(-30, 30), min_size=2, max_size=40))
def test_sampler_never_crashes_on_finite_settings(temperature, top_p, top_k, seed, logits):
    s = Sampler(Sampling(temperature, top_k, top_p, seed))
    p = s.probs(torch.tensor([logits]))
    assert torch.isfinite(p).all() and math.isclose(float(p.sum()), 1.0, rel_tol=1e-4)
    assert 0 <= s.pick(p[0]) < len(logits)


@pytest.mark.parametrize("kw, sentence", [
    (dict(temperature=float("nan")), "Temperature must be a finite number"),
    (dict(temperature=float("inf")), "Temperature must be a finite number"),
    (dict(temperature=-0.5), "Temperature must be a finite number"),
    (dict(temperature=1.0, top_p=float("nan")), "Top-p must be a number in (0, 1]."),
    (dict(temperature=1.0, top_p=0.0), "Top-p must be a number in (0, 1]."),
    (dict(temperature=1.0, top_p=1.5), "Top-p must be a number in (0, 1]."),
    (dict(temperature=1.0, top_k=-1), "Top-k must be a whole number"),
    (dict(temperature=1.0, top_k=2.5), "Top-k must be a whole number"),
    (dict(temperature=1.0, seed=-1), "The seed must be a whole number from 0"),
    (dict(temperature=1.0, seed=2 ** 64), "The seed must be a whole number from 0"),
    (dict(temperature=1.0, seed=1e30), "The seed must be a whole number from 0"),
])
def test_sampler_refuses_the_rest_with_one_sentence(kw, sentence):
    with pytest.raises(ValueError) as e:
        Sampler(Sampling(**kw))
    assert str(e.value).startswith(sentence) and "\n" not in str(e.value)
