"""Lossless at a real shape: E2B's (35 layers of width 1536, 262,144 tokens, KV shared over
the last 20 layers, per-layer inputs, sliding window 512, the clustered assistant) with
random weights in float32, about 19 GB, so it runs alone (the realscale tier, after the
vLLM servers stop: .ci/run). The prompt is longer than the sliding window, as token ids.

Greedy output of our eager and compiled engines, plain and with the MTP assistant, equals
transformers' own ``generate``, plain and assisted with the same assistant."""
import pytest
import torch

from mtp_viz.engine import loop
from mtp_viz.sources.models import load_pair
from mtp_viz.sources.settings import RunSettings

pytestmark = [pytest.mark.slow, pytest.mark.realscale]
N, PROMPT = 8, 600   # past the sliding window of 512


@pytest.fixture(scope="module")
def pair():
    before = torch.get_num_threads()
    torch.set_num_threads(2)   # alone on the machine: both cores
    p = load_pair("e2b", weights="random", dtype="float32")
    yield p
    torch.set_num_threads(before)


@pytest.fixture(scope="module")
def prompt(pair):
    g = torch.Generator().manual_seed(7)
    return torch.randint(3, pair.target.config.text_config.vocab_size, (PROMPT,), generator=g).tolist()


@pytest.fixture(scope="module")
def reference(pair, prompt):
    x = torch.tensor([prompt])
    # a checkpoint's assistant ships a generation config with its draft length; one built
    # from a config has none, and transformers' assisted decoding reads it
    pair.drafter_model.generation_config.num_assistant_tokens = 4
    pair.drafter_model.generation_config.num_assistant_tokens_schedule = "constant"
    with torch.inference_mode():
        plain = pair.target.generate(x, attention_mask=torch.ones_like(x), do_sample=False, max_new_tokens=N,
                                     eos_token_id=None, pad_token_id=0)[0, PROMPT:].tolist()
        assisted = pair.target.generate(x, attention_mask=torch.ones_like(x), assistant_model=pair.drafter_model,
                                        do_sample=False, max_new_tokens=N, eos_token_id=None,
                                        pad_token_id=0)[0, PROMPT:].tolist()
    assert plain == assisted    # transformers' own assisted decoding is lossless here too
    return plain


def ours(p, prompt):
    plain = list(loop.autoregressive(p.decoder, prompt, max_new_tokens=N))[-1].generated_ids
    spec = list(loop.speculative(p.decoder, p.make_drafter("mtp"), prompt, max_new_tokens=N,
                                 draft_tokens=4))[-1].generated_ids
    return list(plain), list(spec)


def same_logits(p, prompt, reference, full_logits):
    """The decoder's logits for the reference's tokens, verified 5 at a time over the
    prompt's cache, are transformers' own from one forward over the whole sequence: the
    tokens could agree by a strong argmax alone, the logits cannot."""
    rows = []
    with p.decoder.open(PROMPT + N + 8) as kv:
        kv.forward(prompt, True, keep=1, prefill=True)
        for i in range(0, N, 5):
            chunk = reference[i:i + 5]
            rows.append(kv.forward(chunk, True, keep=len(chunk)).logits)
    got = torch.cat(rows)
    want = full_logits[PROMPT:PROMPT + N]
    return (got - want).abs().max().item()


@pytest.fixture(scope="module")
def full_logits(pair, prompt, reference):
    with torch.inference_mode():
        return pair.target(input_ids=torch.tensor([prompt + reference])).logits[0].float()


def test_the_shape_is_e2bs(pair):
    t = pair.target.config.text_config
    assert type(pair.target).__name__ == "Gemma4ForConditionalGeneration" and t.num_hidden_layers == 35
    assert sum(p.numel() for p in pair.target.parameters()) > 4.6e9
    assert pair.drafter_model.config.use_ordered_embeddings and pair.target.dtype == torch.float32


def test_the_eager_engine_gives_transformers_greedy_tokens(pair, prompt, reference, full_logits):
    plain, spec = ours(pair, prompt)
    assert plain == reference and spec == reference
    assert same_logits(pair, prompt, reference, full_logits) < 1e-3


def test_the_compiled_engine_gives_transformers_greedy_tokens(pair, prompt, reference, full_logits):
    plan = RunSettings("x" * PROMPT, max_new_tokens=N, chat=False, draft_tokens=4)
    compiled_pair = pair.on("compiled", settings=[plan])
    assert not compiled_pair.compile_note and compiled_pair.engine == "compiled"
    plain, spec = ours(compiled_pair, prompt)
    assert plain == reference and spec == reference
    assert same_logits(compiled_pair, prompt, reference, full_logits) < 1e-3
