"""Real Gemma 4 shapes with random weights: every preset's shape ships and builds as the
class its checkpoint loads as, a shape that does not fit is refused before a byte is
allocated, and a random pair decodes, labelled, through every front end's door."""
import json

import pytest
import torch
import transformers

from mtp_viz.errors import UserError
from mtp_viz.sources import memory, shapes
from mtp_viz.sources.models import load_pair
from mtp_viz.sources.presets import PRESETS

REAL = [k for k in PRESETS if k != "tiny"]
CLASSES = {"12b": ("Gemma4UnifiedForConditionalGeneration", "Gemma4UnifiedAssistantForCausalLM")}
# parameters of each target, counted on the meta device from the shipped shape (SOURCES.md
# compares them with published figures); a change to a shipped number changes these
PARAMS_B = {"e2b": 4.63, "e4b": 7.46, "12b": 11.91, "31b": 30.70, "26b-a4b": 25.23}


def test_every_preset_ships_a_shape_with_its_sources():
    assert sorted(shapes.shipped()) == sorted(REAL)
    sources = (shapes.shapes_dir() / "SOURCES.md").read_text(encoding="utf-8")
    for key in REAL:
        assert f"{key}.target.json" in sources and f"{key}.assistant.json" in sources


@pytest.mark.parametrize("key", REAL)
def test_a_shipped_shape_builds_the_checkpoints_classes_at_its_size(key, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    s = shapes.shape(key)
    assert s.origin == "shipped"
    target_cls, drafter_cls = CLASSES.get(key, ("Gemma4ForConditionalGeneration", "Gemma4AssistantForCausalLM"))
    with torch.device("meta"):
        target = transformers.AutoModelForCausalLM.from_config(s.target)
        drafter = transformers.AutoModelForCausalLM.from_config(s.drafter)
    assert type(target).__name__ == target_cls and type(drafter).__name__ == drafter_cls
    assert sum(p.numel() for p in target.parameters()) / 1e9 == pytest.approx(PARAMS_B[key], abs=0.01)
    text = json.loads((shapes.shapes_dir() / f"{key}.target.json").read_text())
    assert target.config.text_config.num_hidden_layers == text["num_hidden_layers"]
    assert s.drafter.backbone_hidden_size == text["hidden_size"]


def test_e2b_has_the_shape_the_issue_measured(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    t = shapes.shape("e2b").target.text_config.to_dict()   # head_dim varies by layer: read it as written
    assert [t[k] for k in ("num_hidden_layers", "hidden_size", "intermediate_size", "num_attention_heads",
                           "num_key_value_heads", "head_dim", "sliding_window",
                           "num_kv_shared_layers", "hidden_size_per_layer_input", "vocab_size")] == \
        [35, 1536, 6144, 8, 1, 256, 512, 20, 256, 262144]
    assert {v["head_dim"] for v in t["per_layer_config"].values()} == {512}   # the global layers' head
    assert t["layer_types"].count("full_attention") == 7
    d = shapes.shape("e2b").drafter
    assert d.use_ordered_embeddings and d.num_centroids == 2048 and d.centroid_intermediate_top_k == 32
    moe = shapes.shape("26b-a4b").target.text_config
    assert moe.enable_moe_block and moe.num_experts == 128 and moe.top_k_experts == 8


def test_offline_the_hub_is_never_asked(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")

    def no_network(*args, **kwargs):
        raise AssertionError("the network was asked")
    import socket
    monkeypatch.setattr(socket, "create_connection", no_network)
    assert shapes.shape("e4b").origin == "shipped"


def test_a_shape_too_big_for_memory_is_one_sentence_before_any_allocation(monkeypatch, tmp_path):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    path = tmp_path / "meminfo"
    path.write_text("MemTotal: 24683656 kB\nMemAvailable: 8000000 kB\n")
    monkeypatch.setattr(memory, "MEMINFO", str(path))
    monkeypatch.setattr(memory, "CGROUPS", ())

    def refuse(*args, **kwargs):
        raise AssertionError("a model was built")
    monkeypatch.setattr(shapes, "build", refuse)
    with pytest.raises(UserError) as e:
        load_pair("e2b", weights="random", dtype="bfloat16")
    sentence = str(e.value)
    assert sentence.count(". ") == 0 and "e2b with random weights" in sentence
    assert "9.4 GB in bfloat16" in sentence and "8.2 GB available" in sentence


def test_random_weights_refuse_what_they_cannot_be(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(UserError, match="int4 has no kernel on this CPU"):   # torchao 0.18's int4: CUDA only
        load_pair("tiny", weights="random", dtype="int4")
    with pytest.raises(UserError, match="leave out the drafter"):
        load_pair("tiny", "e2b", weights="random")
    with pytest.raises(UserError, match="Unknown weights"):
        load_pair("tiny", weights="fake")


def test_random_weights_in_int8_are_torchaos_weight_only_where_transformers_would_put_it():
    """Every linear layer int8 with a scale a row, computed in float32, as TorchAoConfig
    puts it, and the output head too (precision.int8_head), untied from the input
    embedding, which keeps its float table."""
    pytest.importorskip("torchao")
    from transformers.quantizers.base import get_keys_to_not_convert
    pair = load_pair("tiny", weights="random", dtype="int8")
    for model in (pair.target, pair.drafter_model):
        keep = set(get_keys_to_not_convert(model))
        head = model.get_output_embeddings()
        assert any(model.get_submodule(name) is head for name in keep)   # TorchAoConfig would have kept it
        for name, m in model.named_modules():
            if isinstance(m, torch.nn.Linear):
                assert (type(m.weight).__name__ == "Int8Tensor") == (name not in keep or m is head), name
        assert type(model.get_input_embeddings().weight) is torch.nn.Parameter
        assert all(p.dtype == torch.float32 for p in model.parameters())
    assert pair.precision == {"target": "int8", "drafter": "int8"}


def test_a_random_pair_decodes_to_its_limit_and_says_what_it_is():
    pair = load_pair("tiny", weights="random")
    assert pair.weights == "random" and pair.weights_label == shapes.LABEL
    real = load_pair("tiny")
    for (name, p), (_, q) in zip(pair.target.named_parameters(), real.target.named_parameters()):
        assert p.shape == q.shape, name
    assert any(not torch.equal(p, q) for p, q in zip(pair.target.parameters(), real.target.parameters()))
    events = list(pair.generate("def main():", max_new_tokens=12, chat=False))
    assert events[0].settings["weights"] == "random"
    assert events[-1].new_tokens == 12 and events[-1].stop_reason == "max_new_tokens"   # no end of text
    assert "weights" not in list(real.generate("x", max_new_tokens=2, chat=False))[0].settings


def test_the_random_tokenizer_encodes_any_text_and_decodes_every_id():
    tok = shapes.tokenizer(1000)
    ids = tok("é ∑ def")["input_ids"]
    assert tok.decode(ids) == "é ∑ def" and max(ids) < 3 + 256
    assert tok.decode([999]) == "<t999>" and len(tok) == 1000


def _small_e2b(layers=12, shared=4):
    """E2B's layer pattern and head sizes at a width and vocabulary a test can build."""
    d = json.loads((shapes.shapes_dir() / "e2b.target.json").read_text())
    d.update(layer_types=d["layer_types"][:layers], num_hidden_layers=layers, num_kv_shared_layers=shared,
             vocab_size=2048, vocab_size_per_layer_input=2048, hidden_size=256, intermediate_size=512)
    return shapes._wrapper(d)


def _width_gap(model):
    """How far the logits of one position part when it is verified among 5 tokens rather
    than stepped alone over the same cache."""
    from transformers import DynamicCache
    ids = torch.randint(3, 2048, (1, 32), generator=torch.Generator().manual_seed(0))
    rows = []
    with torch.no_grad():
        for width in (1, 5):
            out = model(input_ids=ids, cache=DynamicCache(config=model.config), use_cache=True)
            nxt = torch.tensor([[int(out.logits[0, -1].argmax())] + [5] * (width - 1)])
            rows.append(model(input_ids=nxt, cache=out.past_key_values, use_cache=True).logits[0, 0].float())
    return (rows[0] - rows[1]).abs().max().item()


def test_a_random_target_attends_at_a_trained_models_temperature():
    """Unsteadied, each head's scores have variance head_dim and a rounding difference
    between two widths' products switches its near-argmax softmax; steadied, the widths
    agree to float32's rounding, so a greedy path does not depend on the draft length."""
    model = shapes.build(_small_e2b(), "float32", "cpu")
    norms = [m for n, m in model.named_modules() if n.endswith("k_norm")]
    assert norms and all(torch.allclose(m.weight, torch.full_like(m.weight, m.weight.numel() ** -0.5)) for m in norms)
    steadied = _width_gap(model)
    for m in norms:
        m.weight.data.fill_(1.0)   # transformers' own initialisation
    assert steadied < 1e-5 and _width_gap(model) > 5 * steadied
