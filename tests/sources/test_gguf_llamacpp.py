"""`mtp-viz gguf`'s files in a real llama.cpp (marked ``llamacpp``: `python -m pytest -m llamacpp`;
llama-server from scripts/llamacpp.sh, see tests/real_llamacpp.py).

- The bundled target, f32: llama.cpp's ``/tokenize`` gives transformers' ids on the 12 held-out
  prompts, and its greedy ``/completion`` from those ids gives transformers' greedy tokens.
- The bundled pair with MTP (``--spec-type draft-mtp``) gives the same tokens (the bundled
  drafter is shaped as llama.cpp's loader wants).
- A random pair shaped as the real checkpoints are (the assistant narrower, sliding and full
  layers, full attention's heads wider) loads with draft-mtp, drafts, and writes what the
  target alone writes, which is transformers' greedy output.
- What the writer writes equals what llama.cpp's own converter writes for that pair.
"""
import json
import subprocess
import sys

import numpy as np
import pytest
import torch

gguf = pytest.importorskip("gguf")

from factories import gemma_bpe_tokenizer, llamacpp_shaped_pair, save_pair  # noqa: E402
from mtp_viz.paths import assets_dir  # noqa: E402
from mtp_viz.sources.llamacpp.gguf import export_pair  # noqa: E402
from real_llamacpp import call, greedy, kept_folder, llama_server, serving  # noqa: E402

pytestmark = pytest.mark.llamacpp
N = 64
MTP = ("--spec-type", "draft-mtp", "--spec-draft-n-max", "4", "-td", "1", "-tbd", "1")
PROMPTS = [p["prompt"] for p in json.loads((assets_dir() / "tiny" / "eval_prompts.json").read_text())["prompts"]]


def until_eos(tokens, eos=1):
    """The tokens before the end of text (transformers keeps the EOS it wrote; llama.cpp does not)."""
    return tokens[:tokens.index(eos)] if eos in tokens else tokens


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    llama_server()  # skip before exporting when there is no server
    return export_pair("tiny", None, tmp_path_factory.mktemp("tiny-gguf"), "f32")


@pytest.fixture(scope="module")
def reference():
    """transformers' ids for each held-out prompt and its greedy 64 tokens from them."""
    from transformers import AutoModelForCausalLM, AutoTokenizer
    folder = str(assets_dir() / "tiny" / "target")
    tok = AutoTokenizer.from_pretrained(folder)
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
    out = []
    for prompt in PROMPTS:
        ids = tok(prompt).input_ids
        with torch.no_grad():
            new = model.generate(torch.tensor([ids]), do_sample=False, max_new_tokens=N, pad_token_id=0)
        out.append((ids, until_eos(new[0, len(ids):].tolist())))
    return out


def test_the_bundled_target_tokenizes_and_writes_as_transformers(tiny, reference):
    with serving(tiny.target) as url:
        tokenized = [call(url, "/tokenize", {"content": p, "add_special": True})["tokens"] for p in PROMPTS]
        written = [until_eos(greedy(url, ids, N)["tokens"]) for ids, _ in reference]
    assert sum(t == ids for t, (ids, _) in zip(tokenized, reference)) == len(PROMPTS) == 12
    assert sum(w == ref for w, (_, ref) in zip(written, reference)) == 12


def test_the_bundled_pair_with_mtp_writes_as_transformers(tiny, reference):
    assert tiny.notes == []   # the bundled drafter is shaped as llama.cpp's loader wants
    with serving(tiny.target, "-md", str(tiny.drafter), *MTP) as url:
        results = [greedy(url, ids, N) for ids, _ in reference]
    assert [until_eos(r["tokens"]) for r in results] == [ref for _, ref in reference]
    assert sum(r["timings"]["draft_n"] for r in results) > 0                      # it did draft
    assert all(r["timings"]["draft_n_accepted"] <= r["timings"]["draft_n"] for r in results)


@pytest.fixture(scope="module")
def shaped(tmp_path_factory):
    llama_server()
    root = tmp_path_factory.mktemp("shaped")
    target, assistant = llamacpp_shaped_pair()
    folder, drafter = save_pair(root, target, assistant, gemma_bpe_tokenizer())
    return folder, drafter, export_pair(str(folder), None, root / "gguf", "f32")


def test_a_pair_shaped_as_the_real_ones_drafts_in_llamacpp_and_loses_nothing(shaped):
    folder, _, result = shaped
    assert result.notes == []
    prompts = [torch.randint(4, 512, (30,), generator=torch.Generator().manual_seed(s)).tolist() for s in range(3)]
    prompts = [[2] + p for p in prompts]   # BOS, then more tokens than the sliding window (16)
    with serving(result.target) as url:
        plain = [greedy(url, ids, 32)["tokens"] for ids in prompts]
    with serving(result.target, "-md", str(result.drafter), *MTP) as url:
        mtp = [greedy(url, ids, 32) for ids in prompts]
    assert [r["tokens"] for r in mtp] == plain and all(len(p) == 32 for p in plain)
    assert all(r["timings"]["draft_n"] > 0 for r in mtp)
    # and what transformers writes: wider full-attention heads and per-layer inputs computed alike
    from transformers import AutoModelForCausalLM
    target = AutoModelForCausalLM.from_pretrained(folder).eval()
    with torch.no_grad():
        assert plain == [target.generate(torch.tensor([ids]), do_sample=False, max_new_tokens=32,
                                         pad_token_id=0)[0, len(ids):].tolist() for ids in prompts]


def test_the_writer_writes_what_llamacpps_converter_writes(shaped, tmp_path):
    convert = kept_folder() / "source" / "convert_hf_to_gguf.py"
    if not convert.is_file():
        pytest.skip(f"no llama.cpp source at {convert.parent} (scripts/llamacpp.sh keeps it there)")
    folder, drafter, result = shaped
    for model, ours in ((folder, result.target), (drafter, result.drafter)):
        theirs = tmp_path / (model.name + ".gguf")
        subprocess.run([sys.executable, str(convert), str(model), "--outfile", str(theirs), "--outtype", "f32"],
                       check=True, capture_output=True, timeout=300)
        a, b = gguf.GGUFReader(ours), gguf.GGUFReader(theirs)
        skip = {"general.name", "general.size_label", "GGUF.kv_count"}   # the file's label (ours has no size label)
        fields = {f.name: f.contents() for f in a.fields.values() if f.name not in skip}
        assert fields == {f.name: f.contents() for f in b.fields.values() if f.name not in skip}
        mine, stock = {t.name: t for t in a.tensors}, {t.name: t for t in b.tensors}
        assert mine.keys() == stock.keys()
        for name, t in stock.items():
            assert mine[name].tensor_type == t.tensor_type, name
            np.testing.assert_array_equal(np.asarray(mine[name].data), np.asarray(t.data), err_msg=name)


def test_a_random_pair_at_a_real_shape_serves_with_mtp_and_writes_as_our_engine(tmp_path, monkeypatch):
    """`mtp-viz gguf --weights random` (the peers' side of a real-scale study): the same seed
    builds the same random weights for llama.cpp and for our engine, so llama-server, plain
    and with the assistant drafting, writes our eager engine's greedy tokens."""
    from mtp_viz.cli.main import main
    from mtp_viz.engine import loop
    from mtp_viz.sources.models import load_pair
    llama_server()
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert main(["gguf", "--target", "tiny", "--weights", "random", "--outtype", "f32", "--out", str(tmp_path)]) == 0
    pair = load_pair("tiny", weights="random", dtype="float32")
    ids = [2] + torch.randint(3, 4096, (40,), generator=torch.Generator().manual_seed(3)).tolist()
    ours = list(list(loop.autoregressive(pair.decoder, ids, max_new_tokens=24))[-1].generated_ids)
    with serving(tmp_path / "target.gguf") as url:
        plain = greedy(url, ids, 24)["tokens"]
    with serving(tmp_path / "target.gguf", "-md", str(tmp_path / "drafter.gguf"), *MTP) as url:
        mtp = greedy(url, ids, 24)
    assert plain == ours and mtp["tokens"] == ours and mtp["timings"]["draft_n"] > 0
