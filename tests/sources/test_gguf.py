"""`mtp-viz gguf`: a Gemma 4 pair as GGUF files, read back with the gguf package's reader
(no llama.cpp needed; tests/sources/test_gguf_llamacpp.py runs them in llama.cpp).

Random pairs of every class real checkpoints load as (the text-only target, the multimodal
wrapper of E2B/E4B/31B with E2B's per-layer embeddings, its 26B-A4B mixture of experts, the
12B's unified classes) and the bundled pair: the architecture, its hyperparameters, every
tensor's name, shape, storage type and values, the tokenizer as llama.cpp will read it; and
each mistake a user can make as one sentence with exit status 2."""
import json

import numpy as np
import pytest

gguf = pytest.importorskip("gguf")

from factories import (  # noqa: E402
    gemma_assistant,
    gemma_bpe_tokenizer,
    gemma_multimodal,
    gemma_target,
    llama,
    llamacpp_shaped_pair,
    save_pair,
    unified_assistant,
    unified_target,
    word_tokenizer,
)
from mtp_viz.cli.main import main  # noqa: E402
from mtp_viz.errors import UserError  # noqa: E402
from mtp_viz.paths import assets_dir  # noqa: E402
from mtp_viz.sources.llamacpp.gguf import export_pair  # noqa: E402

V, WINDOW = 512, 16
CLASSES = {  # kind -> (target, assistant); the E2B/E4B wrapper with its clustered head
    "causal": (lambda: gemma_target(V, WINDOW), lambda: gemma_assistant(V, WINDOW)),
    "multimodal": (lambda: gemma_multimodal(V, WINDOW), lambda: gemma_assistant(V, WINDOW, ordered=True)),
    "moe": (lambda: gemma_multimodal(V, WINDOW, moe=True), lambda: gemma_assistant(V, WINDOW)),
    "unified": (lambda: unified_target(V, WINDOW), lambda: unified_assistant(V, WINDOW)),
}
# what every layer of a target holds in llama.cpp's names, and what the variants add
LAYER = {"attn_norm", "attn_q", "attn_k", "attn_v", "attn_output", "attn_q_norm", "attn_k_norm",
         "post_attention_norm", "ffn_norm", "ffn_gate", "ffn_up", "ffn_down", "post_ffw_norm", "layer_output_scale"}
PER_LAYER_INPUT = {"inp_gate", "proj", "post_norm"}
MOE = {"ffn_gate_inp", "ffn_gate_up_exps", "ffn_down_exps", "pre_ffw_norm_2", "post_ffw_norm_1", "post_ffw_norm_2"}
ASSISTANT_LAYER = LAYER - {"attn_k", "attn_v", "attn_k_norm"}   # its keys and values are the target's


def kv(reader, key):
    return reader.fields[key].contents()


def tensors(reader):
    return {t.name: t for t in reader.tensors}


def layer_names(names, i):
    return {n[len(f"blk.{i}."):].rsplit(".", 1)[0] for n in names if n.startswith(f"blk.{i}.")}


@pytest.fixture(scope="module", params=list(CLASSES))
def exported(request, tmp_path_factory):
    root = tmp_path_factory.mktemp(request.param)
    target, assistant = (make() for make in CLASSES[request.param])
    folder, _ = save_pair(root, target, assistant, gemma_bpe_tokenizer(V))
    result = export_pair(str(folder), None, root / "gguf")
    return request.param, target, assistant, result


def test_the_target_has_gemma4s_hyperparameters(exported):
    kind, target, _, result = exported
    r = gguf.GGUFReader(result.target)
    assert kv(r, "general.architecture") == "gemma4" and kv(r, "general.file_type") == 0
    a = "gemma4."
    assert kv(r, a + "block_count") == 4 and kv(r, a + "embedding_length") == 64
    assert kv(r, a + "feed_forward_length") == 128 and kv(r, a + "context_length") == 2048
    assert kv(r, a + "attention.head_count") == 2 and kv(r, a + "attention.head_count_kv") == 1
    assert kv(r, a + "attention.key_length") == kv(r, a + "attention.key_length_swa") == 32
    assert kv(r, a + "attention.sliding_window") == WINDOW
    assert kv(r, a + "attention.sliding_window_pattern") == [True, True, True, False]
    assert kv(r, a + "rope.freq_base") == 1e6 and kv(r, a + "rope.freq_base_swa") == 1e4
    assert kv(r, a + "rope.dimension_count") == kv(r, a + "rope.dimension_count_swa") == 32
    assert kv(r, a + "embedding_length_per_layer_input") == (0 if kind == "unified" else 8)
    if kind == "moe":
        assert (kv(r, a + "expert_count"), kv(r, a + "expert_used_count")) == (8, 2)
        assert kv(r, a + "expert_feed_forward_length") == 32
    else:
        assert a + "expert_count" not in r.fields


def test_the_target_tensors_are_the_checkpoints_under_llamacpps_names(exported):
    kind, target, _, result = exported
    t = tensors(gguf.GGUFReader(result.target))
    wanted = LAYER | (PER_LAYER_INPUT if kind != "unified" else set()) | (MOE if kind == "moe" else set())
    for i in range(4):
        assert layer_names(t, i) == wanted, i
    top = {n for n in t if not n.startswith("blk.")}
    assert top == {"token_embd.weight", "output_norm.weight", "rope_freqs.weight"} | (
        set() if kind == "unified" else {"per_layer_token_embd.weight", "per_layer_model_proj.weight",
                                         "per_layer_proj_norm.weight"})
    text = target.model.language_model if hasattr(target.model, "language_model") else target.model
    embed = text.embed_tokens.weight.detach().numpy()
    assert list(t["token_embd.weight"].shape) == [64, V]      # GGUF's order: torch's reversed
    np.testing.assert_array_equal(np.asarray(t["token_embd.weight"].data), embed)
    q = text.layers[3].self_attn.q_proj.weight.detach().numpy()
    np.testing.assert_array_equal(np.asarray(t["blk.3.attn_q.weight"].data), q)
    # full attention's proportional RoPE: a quarter of the 32 dimensions rotate (4 pairs)
    np.testing.assert_array_equal(np.asarray(t["rope_freqs.weight"].data), np.float32([1.0] * 4 + [1e30] * 12))
    if kind == "moe":
        assert list(t["blk.0.ffn_gate_up_exps.weight"].shape) == [64, 64, 8]   # [hidden, 2 × 32, experts]
        assert t["blk.0.ffn_gate_inp.weight"].tensor_type == gguf.GGMLQuantizationType.F32


def test_the_drafter_is_a_gemma4_assistant_for_the_targets_width(exported):
    kind, _, assistant, result = exported
    r = gguf.GGUFReader(result.drafter)
    a = "gemma4-assistant."
    assert kv(r, "general.architecture") == "gemma4-assistant"
    assert kv(r, a + "embedding_length") == 32 and kv(r, a + "embedding_length_out") == 64
    assert kv(r, a + "block_count") == kv(r, a + "nextn_predict_layers") == 2
    assert kv(r, a + "attention.shared_kv_layers") == 2
    assert kv(r, a + "attention.sliding_window_pattern") == [True, False]
    t = tensors(r)
    assert all(layer_names(t, i) == ASSISTANT_LAYER for i in range(2))
    assert list(t["nextn.pre_projection.weight"].shape) == [128, 32]    # [target embedding | hidden] -> 32
    assert list(t["nextn.post_projection.weight"].shape) == [32, 64]
    assert not any("masked_embedding" in n or "centroid" in n for n in t)   # as llama.cpp's converter: left out
    assert result.notes == []          # shaped as llama.cpp's loader wants


def test_both_files_carry_gemmas_tokenizer_as_llamacpp_reads_it(exported):
    _, _, _, result = exported
    tok = gemma_bpe_tokenizer(V)
    for path in (result.target, result.drafter):   # llama.cpp checks that the two vocabularies agree
        r = gguf.GGUFReader(path)
        assert kv(r, "tokenizer.ggml.model") == "gemma4"
        assert kv(r, "tokenizer.ggml.tokens") == tok.convert_ids_to_tokens(list(range(V)))
        types = kv(r, "tokenizer.ggml.token_type")
        assert types[:4] == [gguf.TokenType.CONTROL] * 4 and set(types[4:260]) == {gguf.TokenType.BYTE}
        assert set(types[260:]) == {gguf.TokenType.NORMAL}
        assert len(kv(r, "tokenizer.ggml.merges")) == V - 4 - 256 - 27
        assert (kv(r, "tokenizer.ggml.bos_token_id"), kv(r, "tokenizer.ggml.eos_token_id")) == (2, 1)
        assert kv(r, "tokenizer.ggml.add_bos_token") is True


def test_wider_full_attention_heads_are_read_per_layer(tmp_path):
    """As on the real checkpoints (512 against 256): full attention's heads are wider than
    sliding attention's, which transformers 5 keeps in per_layer_config (its config object
    then refuses a global head_dim); the assistant has both kinds of layers."""
    target, assistant = llamacpp_shaped_pair(V, WINDOW)
    folder, _ = save_pair(tmp_path, target, assistant, gemma_bpe_tokenizer(V))
    result = export_pair(str(folder), None, tmp_path / "gguf")
    for path, arch, pattern in ((result.target, "gemma4", [True, True, False] * 2),
                                (result.drafter, "gemma4-assistant", [True, True, True, False])):
        r = gguf.GGUFReader(path)
        assert kv(r, "general.architecture") == arch
        assert kv(r, arch + ".attention.key_length") == kv(r, arch + ".rope.dimension_count") == 64
        assert kv(r, arch + ".attention.key_length_swa") == kv(r, arch + ".rope.dimension_count_swa") == 32
        assert kv(r, arch + ".attention.sliding_window_pattern") == pattern
        t = tensors(r)
        # a quarter of 64 dimensions rotate: 8 pairs of 32
        np.testing.assert_array_equal(np.asarray(t["rope_freqs.weight"].data), np.float32([1.0] * 8 + [1e30] * 24))
        assert list(t["blk.0.attn_q.weight"].shape)[1] == 2 * 32
    assert list(tensors(gguf.GGUFReader(result.target))["blk.2.attn_k.weight"].shape) == [64, 64]
    assert result.notes == []


@pytest.fixture(scope="module")
def causal(tmp_path_factory):
    return save_pair(tmp_path_factory.mktemp("causal"), gemma_target(V, WINDOW), gemma_assistant(V, WINDOW),
                     gemma_bpe_tokenizer(V))


@pytest.mark.parametrize("outtype, weights, narrow", [("f16", "F16", "F16"), ("bf16", "BF16", "BF16"),
                                                      ("q8_0", "Q8_0", "F16")])
def test_outtypes_store_weights_so_and_keep_norms_float32(causal, outtype, weights, narrow, tmp_path):
    folder, _ = causal
    result = export_pair(str(folder), None, tmp_path, outtype)
    t = tensors(gguf.GGUFReader(result.target))
    Q = gguf.GGMLQuantizationType
    assert t["blk.0.attn_q.weight"].tensor_type == Q[weights]
    assert t["token_embd.weight"].tensor_type == Q[weights]
    assert t["blk.0.proj.weight"].tensor_type == Q[narrow]     # rows of 8: no whole block of 32 for q8_0
    for name in ("blk.0.attn_norm.weight", "blk.0.layer_output_scale.weight", "rope_freqs.weight"):
        assert t[name].tensor_type == Q.F32, name


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return export_pair("tiny", None, tmp_path_factory.mktemp("tiny"))


def test_the_bundled_target_is_written_with_its_shape(tiny):
    r = gguf.GGUFReader(tiny.target)
    a = "gemma4."
    cfg = json.loads((assets_dir() / "tiny" / "target" / "config.json").read_text())
    assert kv(r, "general.architecture") == "gemma4" and kv(r, a + "block_count") == 24
    assert kv(r, a + "embedding_length") == 256 and kv(r, a + "attention.head_count") == 4
    # transformers 5 wrote no head size for full attention (per_layer_config is empty): head_dim's
    assert cfg["per_layer_config"] == {} and kv(r, a + "attention.key_length") == 64
    assert kv(r, a + "attention.key_length_swa") == 64 and kv(r, a + "attention.sliding_window") == 128
    assert kv(r, a + "attention.sliding_window_pattern") == [t == "sliding_attention" for t in cfg["layer_types"]]
    assert kv(r, a + "rope.dimension_count") == 64
    t = tensors(r)
    assert len([n for n in t if n.startswith("blk.")]) == 24 * len(LAYER)
    np.testing.assert_array_equal(np.asarray(t["rope_freqs.weight"].data), np.float32([1.0] * 8 + [1e30] * 24))


def test_the_bundled_tokenizer_is_written_as_gpt2(tiny):
    from transformers import AutoTokenizer
    tok = AutoTokenizer.from_pretrained(str(assets_dir() / "tiny" / "target"))
    for path in (tiny.target, tiny.drafter):
        r = gguf.GGUFReader(path)
        assert kv(r, "tokenizer.ggml.model") == "gpt2" and kv(r, "tokenizer.ggml.pre") == "gpt-2"
        assert kv(r, "tokenizer.ggml.tokens") == tok.convert_ids_to_tokens(list(range(4096)))
        assert kv(r, "tokenizer.ggml.token_type")[:4] == [gguf.TokenType.CONTROL] * 4
        assert len(kv(r, "tokenizer.ggml.merges")) == 3836
        assert kv(r, "tokenizer.ggml.bos_token_id") == 2 and kv(r, "tokenizer.ggml.add_bos_token") is True


def test_the_bundled_drafter_is_written_as_llamacpp_loads_it(tiny):
    r = gguf.GGUFReader(tiny.drafter)
    assert kv(r, "general.architecture") == "gemma4-assistant"
    assert kv(r, "gemma4-assistant.embedding_length_out") == 256   # the target's width: narrower itself
    assert tiny.notes == []


def test_a_drafter_llamacpp_refuses_is_written_and_what_it_refuses_is_said(tmp_path):
    """As wide as its target, with no sliding-attention layer (the bundled drafter before it
    was reshaped): written all the same, with one note for each."""
    from transformers import Gemma4AssistantConfig, Gemma4AssistantForCausalLM, Gemma4TextConfig
    text = Gemma4TextConfig(
        vocab_size=V, hidden_size=64, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2,
        num_key_value_heads=1, head_dim=32, global_head_dim=32, vocab_size_per_layer_input=0,
        hidden_size_per_layer_input=0, sliding_window=WINDOW, layer_types=["full_attention"], num_kv_shared_layers=1)
    wide = Gemma4AssistantForCausalLM(Gemma4AssistantConfig(text_config=text, backbone_hidden_size=64,
                                                            use_ordered_embeddings=False)).eval()
    target_folder, drafter_folder = save_pair(tmp_path / "wide", gemma_target(V, WINDOW), wide, gemma_bpe_tokenizer(V))
    e = export_pair(str(target_folder), str(drafter_folder), tmp_path / "out")
    assert e.drafter.exists() and len(e.notes) == 2
    assert "as wide as its target" in e.notes[0] and "no sliding-attention layer" in e.notes[1]


def gguf_cli(capsys, *args):
    capsys.readouterr()   # what saving the models printed is not the command's
    code = main(["gguf", *args])
    out = capsys.readouterr()
    return code, out.out, out.err


def test_the_cli_writes_both_files_and_prints_their_paths(capsys, causal, tmp_path):
    folder, _ = causal
    code, out, err = gguf_cli(capsys, "--target", str(folder), "--out", str(tmp_path / "out"), "--outtype", "q8_0")
    assert code == 0 and err == ""
    assert out.split() == [str(tmp_path / "out" / "target.gguf"), str(tmp_path / "out" / "drafter.gguf")]
    assert not list((tmp_path / "out").glob("*.part"))


def save_llama(root):
    llama(V).save_pretrained(root)
    word_tokenizer(V).save_pretrained(root)
    return root


def lonely(root):
    gemma_target(V, WINDOW).save_pretrained(root)
    gemma_bpe_tokenizer(V).save_pretrained(root)
    return root


@pytest.mark.parametrize("case", ["missing", "not gemma 4", "no drafter", "drafter not an assistant", "tokenizer",
                                  "outtype", "out is a file"])
def test_each_mistake_is_one_sentence_and_status_2(capsys, causal, tmp_path, case):
    folder, _ = causal
    out = str(tmp_path / "out")
    args, expected = {
        "missing": (["--target", str(tmp_path / "nowhere"), "--out", out], "There is no loadable model folder at"),
        "not gemma 4": (["--target", str(save_llama(tmp_path / "llama")), "--out", out], "is not a Gemma 4 model"),
        "no drafter": (["--target", str(lonely(tmp_path / "alone")), "--out", out], "has no MTP assistant beside it"),
        "drafter not an assistant": (["--target", str(folder), "--drafter", str(folder), "--out", out],
                                     "is not a Gemma 4 MTP assistant"),
        "tokenizer": (["--target", str(save_pair(tmp_path / "w", gemma_target(V, WINDOW), gemma_assistant(V, WINDOW),
                                                 word_tokenizer(V))[0]), "--out", out],
                      "has no llama.cpp counterpart"),
        "outtype": (["--target", str(folder), "--out", out, "--outtype", "q4_k"], "invalid choice"),
        "out is a file": (["--target", str(folder), "--out", str(folder / "config.json")], "is a file, not a folder"),
    }[case]
    code, stdout, err = gguf_cli(capsys, *args)
    assert code == 2 and stdout == "", err
    assert expected in err and err.count("\n") == 1 and "Traceback" not in err
    assert not (tmp_path / "out" / "target.gguf").exists()


def test_an_unknown_outtype_is_refused_by_the_writer_too(tmp_path):
    with pytest.raises(UserError, match="--outtype must be one of f32, f16, bf16, q8_0"):
        export_pair("tiny", None, tmp_path, "q4")


def test_a_random_pair_at_a_real_shape_is_written_with_that_shape(tmp_path, capsys, monkeypatch):
    """`--weights random`: the bundled shape with random weights, its byte-level tokenizer as a
    gpt2 vocabulary with its one merge (llama.cpp refuses a gpt2 vocabulary without merges),
    and no model folder left behind."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert main(["gguf", "--target", "tiny", "--weights", "random", "--outtype", "bf16", "--out", str(tmp_path)]) == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["drafter.gguf", "target.gguf"]
    r = gguf.GGUFReader(tmp_path / "target.gguf")
    assert kv(r, "gemma4.block_count") == 24 and kv(r, "tokenizer.ggml.model") == "gpt2"
    tokens = kv(r, "tokenizer.ggml.tokens")
    assert len(tokens) == 4096 and tokens[:3] == ["<pad>", "<eos>", "<bos>"] and tokens[-1] == "<t4095>"
    assert kv(r, "tokenizer.ggml.merges") == ["Ġ t"]
    t = tensors(r)
    assert t["blk.0.attn_q.weight"].tensor_type == gguf.GGMLQuantizationType.BF16
    real = tensors(gguf.GGUFReader(export_pair("tiny", None, tmp_path / "real", "bf16").target))
    assert {n: list(x.shape) for n, x in t.items()} == {n: list(x.shape) for n, x in real.items()}
    assert not np.array_equal(np.asarray(t["blk.0.attn_q.weight"].data), np.asarray(real["blk.0.attn_q.weight"].data))


# ---------------------------------------------------------------- a pair or nothing

def copied(causal, root):
    """A copy of the causal pair's two folders, to break (``<root>/target``, ``…-assistant``)."""
    import shutil
    for folder in causal:
        shutil.copytree(folder, root / folder.name)
    return root / causal[0].name, root / causal[1].name


def cut_short(folder):
    """The folder's weights cut to half their bytes, as an interrupted download leaves them."""
    path = folder / "model.safetensors"
    path.write_bytes(path.read_bytes()[:path.stat().st_size // 2])


def edit_config(folder, **changes):
    path = folder / "config.json"
    cfg = json.loads(path.read_text())
    for key, value in changes.items():
        (cfg.get("text_config") or cfg)[key] = value
    path.write_text(json.dumps(cfg))


def one_sentence(err: str, *words):
    assert err.startswith("mtp-viz: error: ") and err.count("\n") == 1 and "Traceback" not in err, err
    for w in words:
        assert w in err, err


def test_unreadable_target_weights_are_one_sentence_and_nothing_is_written(capsys, causal, tmp_path):
    target, _ = copied(causal, tmp_path)
    cut_short(target)
    code, out, err = gguf_cli(capsys, "--target", str(target), "--out", str(tmp_path / "out"))
    assert code == 2 and out == ""
    one_sentence(err, "has weights that cannot be read", "model.safetensors", "nothing was written")
    assert not (tmp_path / "out").exists() or list((tmp_path / "out").iterdir()) == []


def test_an_unreadable_drafter_leaves_an_existing_pair_as_it_was(capsys, causal, tmp_path):
    target, drafter = copied(causal, tmp_path)
    out = tmp_path / "out"
    assert gguf_cli(capsys, "--target", str(target), "--out", str(out))[0] == 0
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    edit_config(target, rms_norm_eps=1e-5)   # another target.gguf, were it written
    cut_short(drafter)
    code, stdout, err = gguf_cli(capsys, "--target", str(target), "--out", str(out), "--force")
    assert code == 2 and stdout == ""
    one_sentence(err, "target-assistant has weights that cannot be read")
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before   # the old pair, whole; no part left


def test_an_existing_pair_is_replaced_only_with_force(capsys, causal, tmp_path):
    out = tmp_path / "out"
    assert gguf_cli(capsys, "--target", str(causal[0]), "--out", str(out))[0] == 0
    (out / "drafter.gguf").unlink()   # half a pair is a pair too
    code, stdout, err = gguf_cli(capsys, "--target", str(causal[0]), "--out", str(out))
    assert code == 2 and stdout == ""
    one_sentence(err, "already holds target.gguf; pass --force to replace it.")
    assert sorted(p.name for p in out.iterdir()) == ["target.gguf"]
    code, stdout, err = gguf_cli(capsys, "--target", str(causal[0]), "--out", str(out), "--force")
    assert code == 0 and err == "" and sorted(p.name for p in out.iterdir()) == ["drafter.gguf", "target.gguf"]


@pytest.mark.parametrize("changes, words", [
    ({"hidden_size": 80}, "config.json says 512 tokens of width 80, but its embedding holds 512 of width 64"),
    ({"num_hidden_layers": 5, "layer_types": ["sliding_attention"] * 4 + ["full_attention"]},
     "config.json says 5 layers, but its weights hold 4"),
    ({"vocab_size": 256}, "config.json says 256 tokens of width 64, but its embedding holds 512"),
])
def test_a_config_that_disagrees_with_its_weights_is_one_sentence(capsys, causal, tmp_path, changes, words):
    target, drafter = copied(causal, tmp_path)
    edit_config(target, **changes)
    if "hidden_size" in changes:   # the drafter's config says it too: the pair's configs agree, the weights do not
        cfg = json.loads((drafter / "config.json").read_text())
        (drafter / "config.json").write_text(json.dumps({**cfg, "backbone_hidden_size": changes["hidden_size"]}))
    if "vocab_size" in changes:
        edit_config(drafter, vocab_size=changes["vocab_size"])
    code, out, err = gguf_cli(capsys, "--target", str(target), "--out", str(tmp_path / "out"))
    assert code == 2 and out == ""
    one_sentence(err, words, "nothing was written")
    assert not (tmp_path / "out").exists() or list((tmp_path / "out").iterdir()) == []


def test_a_drafter_whose_weights_were_made_for_another_width_is_one_sentence(capsys, causal, tmp_path):
    target, _ = copied(causal, tmp_path)
    narrow = save_pair(tmp_path / "narrow", gemma_target(V, WINDOW), gemma_assistant(V, WINDOW, backbone=32),
                       gemma_bpe_tokenizer(V))[1]
    cfg = json.loads((narrow / "config.json").read_text())   # its config claims the target's width
    (narrow / "config.json").write_text(json.dumps({**cfg, "backbone_hidden_size": 64}))
    code, out, err = gguf_cli(capsys, "--target", str(target), "--drafter", str(narrow), "--out", str(tmp_path / "out"))
    assert code == 2 and out == ""
    one_sentence(err, "were not made for a target of width 64")
