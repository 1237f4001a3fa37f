"""The classes real Gemma 4 checkpoints load as, saved as a checkpoint folder is saved
and loaded both ways a user loads them (``load_pair`` on the folder; ``from_models`` on
models from ``AutoModelForCausalLM``): the multimodal wrapper of E2B/E4B/31B, the
26B-A4B's mixture of experts inside that wrapper, and the 12B family's unified classes.
Greedy tokens equal transformers' own, with a prompt longer than the sliding window;
the anatomy panel reads the wrapper's modules."""
import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, Gemma4ForCausalLM

from factories import (
    ScriptDrafter,
    gemma_assistant,
    gemma_multimodal,
    greedy_reference,
    save_pair,
    unified_assistant,
    unified_target,
    word_tokenizer,
)
from invariants import check_invariants, generated
from mtp_viz.analysis.anatomy import anatomy
from mtp_viz.engine.loop import speculative
from mtp_viz.sources.models import from_models, load_pair
from mtp_viz.views.anatomy import anatomy_html

V, WINDOW, N = 512, 16, 24

# kind -> (target, assistant, the target's class, the assistant's class)
CLASSES = {
    # E2B/E4B: the wrapper with the clustered ("ordered embeddings") head
    "multimodal": (lambda: gemma_multimodal(V, WINDOW), lambda: gemma_assistant(V, WINDOW, ordered=True),
                   "Gemma4ForConditionalGeneration", "Gemma4AssistantForCausalLM"),
    "moe": (lambda: gemma_multimodal(V, WINDOW, moe=True), lambda: gemma_assistant(V, WINDOW),
            "Gemma4ForConditionalGeneration", "Gemma4AssistantForCausalLM"),
    "unified": (lambda: unified_target(V, WINDOW), lambda: unified_assistant(V, WINDOW),
                "Gemma4UnifiedForConditionalGeneration", "Gemma4UnifiedAssistantForCausalLM"),
}


@pytest.fixture(scope="module", params=list(CLASSES))
def kind(request):
    return request.param


@pytest.fixture(scope="module")
def folders(kind, tmp_path_factory):
    make_target, make_assistant, *_ = CLASSES[kind]
    return save_pair(tmp_path_factory.mktemp(kind), make_target(), make_assistant(), word_tokenizer(V))


@pytest.fixture(scope="module", params=["load_pair", "from_models"])
def pair(request, folders):
    target, drafter = folders
    if request.param == "load_pair":
        return load_pair(str(target))
    return from_models(AutoModelForCausalLM.from_pretrained(target), AutoModelForCausalLM.from_pretrained(drafter),
                       AutoTokenizer.from_pretrained(target))


@pytest.fixture(scope="module")
def prompt():
    # 30 tokens: longer than the sliding window (16), so the sliding layers roll over
    return torch.randint(3, V, (30,), generator=torch.Generator().manual_seed(7)).tolist()


def test_the_pair_is_the_checkpoints_class(kind, pair):
    _, _, target_class, drafter_class = CLASSES[kind]
    assert type(pair.target).__name__ == target_class and not isinstance(pair.target, Gemma4ForCausalLM)
    assert type(pair.drafter_model).__name__ == drafter_class
    assert pair.is_gemma4 and pair.has_mtp and pair.loaded == "assistant"
    assert pair.device == "cpu" and pair.context_length == 2048
    if kind == "moe":
        assert pair.target.config.get_text_config().enable_moe_block


def test_greedy_tokens_equal_transformers(pair, prompt):
    text = " ".join(f"w{i}" for i in prompt)
    ids = pair.encode(text, chat=False)
    assert ids == prompt and len(ids) > WINDOW
    reference = greedy_reference(pair.target, ids, N)
    assisted = pair.target.generate(torch.tensor([ids]), assistant_model=pair.drafter_model, do_sample=False,
                                    max_new_tokens=N, eos_token_id=None, pad_token_id=0)[0, len(ids):].tolist()
    assert assisted == reference
    for mode in ("speculative", "autoregressive"):
        events = list(pair.generate(text, mode=mode, max_new_tokens=N, chat=False))
        assert generated(events) == reference, mode
        check_invariants(events, N)
    # The random assistant is nearly always wrong; a drafter that proposes the target's own
    # continuation (wrong at every third step) exercises acceptance on these classes too.
    events = list(speculative(pair.target, ScriptDrafter(len(ids), reference, wrong_every=3, vocab=V), ids,
                              max_new_tokens=N, draft_tokens=4))
    assert generated(events) == reference
    assert sum(e.accepted for e in check_invariants(events, N)) >= N // 2


def test_the_anatomy_panel_reads_the_wrapper(kind, pair):
    a = anatomy(pair)
    assert a.kind == "mtp"
    assert (a.target_layers, a.target_width, a.vocab) == (4, 64, 512)
    assert (a.drafter_layers, a.drafter_width, a.input_width, a.projected_width, a.state_width) == (2, 32, 128, 32, 64)
    # each drafter layer reads the K/V of the target's last layer of its attention type
    assert [(layer.attention, layer.reads_target_layer, layer.kv_heads, layer.head_dim) for layer in a.layers] == [
        ("sliding_attention", 3, 1, 32), ("full_attention", 4, 1, 32)]
    assert a.target_params == sum(p.numel() for p in pair.target.parameters())
    if kind == "multimodal":
        assert (a.clustered.centroids, a.clustered.top_clusters, a.clustered.candidates) == (16, 4, 128)
    else:
        assert a.clustered is None
    page = anatomy_html(a)
    assert 'data-target-layers="4"' in page and 'data-target-width="64"' in page
    assert 'data-drafter-layers="2"' in page and 'data-drafter-width="32"' in page
    assert "sliding: target layer 3; full: target layer 4" in page
    assert ("128 candidate tokens" in page) == (kind == "multimodal")


def test_a_text_only_unified_target_finds_its_assistant(tmp_path):
    """``Gemma4UnifiedForCausalLM`` (model_type ``gemma4_unified_text``) is a Gemma 4
    target too: its sibling ``-assistant`` folder is its drafter."""
    target, _ = save_pair(tmp_path, unified_target(V, WINDOW, wrapper=False), unified_assistant(V, WINDOW),
                          word_tokenizer(V))
    pair = load_pair(str(target))
    assert type(pair.target).__name__ == "Gemma4UnifiedForCausalLM"
    assert pair.is_gemma4 and pair.has_mtp
