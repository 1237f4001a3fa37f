"""Each model's precision: names checked in one sentence, the load in that precision
(transformers' own TorchAoConfig for int8 and int4), what a pair reports it runs in
(read from the models, also for models loaded by the user), the memory estimate for
quantized weights, one sentence for a precision without a kernel here, and one for
torchao missing (a real import failure, in a subprocess)."""
import os
import subprocess
import sys

import pytest
import torch
import transformers

from factories import gemma_assistant, gemma_target, save_gemma_pair, word_tokenizer
from locations import ROOT
from mtp_viz.errors import UserError
from mtp_viz.sources import memory
from mtp_viz.sources.models import from_models, load_pair
from mtp_viz.sources.precision import Precision, precision_name, precision_of


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    return save_gemma_pair(tmp_path_factory.mktemp("precision"))


def test_names_and_their_one_sentence():
    assert [precision_name(v) for v in ("bf16", " FP16 ", "fp32", "int8", "int4", None, "", "auto")] == \
        ["bfloat16", "float16", "float32", "int8", "int4", None, None, None]
    with pytest.raises(UserError) as e:
        precision_name("int3", "target precision")
    assert str(e.value) == "Unknown target precision 'int3'; use float32, bfloat16, float16, int8 or int4."
    assert Precision.of("bfloat16") == Precision("bfloat16", "bfloat16")  # --dtype: both models
    assert Precision.of("bfloat16", drafter="int8") == Precision("bfloat16", "int8")  # one model's own wins
    assert Precision.of(None, target="fp16").resolved("cpu") == Precision("float16", "float32")
    assert Precision.of().resolved("cuda") == Precision("bfloat16", "bfloat16")
    assert Precision.parse(" int8 / bf16 ") == Precision("int8", "bfloat16")
    for bad, words in (("int8", "A precision pair is target/drafter, like float32/int8, not 'int8'."),
                       ("int8/fp8", "Unknown drafter precision 'fp8'")):
        with pytest.raises(UserError, match=words):
            Precision.parse(bad)


def real_bytes(model) -> int:
    """Bytes held by the parameters, a torchao tensor's inner tensors counted."""
    def size(t):
        if hasattr(t, "__tensor_flatten__"):
            return sum(size(getattr(t, name)) for name in t.__tensor_flatten__()[0])
        return t.numel() * t.element_size()
    return sum(size(p) for p in model.parameters())


@pytest.mark.parametrize("precision", ["float32", "bfloat16", "float16", "int8"])
def test_each_model_loads_in_its_precision_and_says_so(folders, precision):
    pair = load_pair(str(folders[0]), target_precision=precision, drafter_precision="float32")
    assert pair.precision == {"target": precision, "drafter": "float32"}
    assert pair.drafter_model.dtype == torch.float32
    cfg = transformers.AutoConfig.from_pretrained(folders[0])
    if precision == "int8":  # transformers' own config, int8 linear weights, float32 arithmetic
        assert isinstance(pair.target.config.quantization_config, transformers.TorchAoConfig)
        assert type(pair.target.model.layers[0].mlp.up_proj.weight).__name__ == "Int8Tensor"
        assert pair.target.dtype == torch.float32
        assert memory.weight_bytes(cfg, torch.float32, 8) == real_bytes(pair.target)
        assert real_bytes(pair.target) < memory.weight_bytes(cfg, torch.float32)
    else:
        assert pair.target.dtype == getattr(torch, precision)
        assert memory.weight_bytes(cfg, pair.target.dtype) == real_bytes(pair.target)
    events = list(pair.generate("w10 w11", max_new_tokens=6, chat=False))
    assert events[0].settings["target_precision"] == precision and events[-1].new_tokens == 6


def test_int4_without_a_kernel_is_one_sentence_before_any_weights_load(folders, monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("weights were loaded")
    monkeypatch.setattr(transformers.AutoModelForCausalLM, "from_pretrained", refuse)
    with pytest.raises(UserError) as e:
        load_pair(str(folders[0]), target_precision="int4")
    assert str(e.value).startswith("int4 has no kernel on this CPU (torchao ")
    assert str(e.value).endswith("'s int4 weight-only layouts need a CUDA GPU); use int8, bfloat16 or float32.")
    with pytest.raises(UserError, match="^int4 has no kernel on this CPU"):
        load_pair(str(folders[0]), dtype="int4")  # the drafter's too
    with pytest.raises(UserError, match="^Unknown dtype 'q4'"):
        load_pair(str(folders[0]), dtype="q4")


def test_the_memory_check_counts_each_model_in_its_precision(folders, monkeypatch):
    configs = [transformers.AutoConfig.from_pretrained(f) for f in folders]
    f32 = memory.check_fits("t", [(configs[0], "float32"), (configs[1], "float32")], "cpu")
    mixed = memory.check_fits("t", [(configs[0], "int8"), (configs[1], "bfloat16")], "cpu")
    assert mixed == memory.weight_bytes(configs[0], torch.float32, 8) + memory.weight_bytes(configs[1], torch.bfloat16)
    assert mixed < f32
    monkeypatch.setattr(memory, "available_bytes", lambda device: 1000)
    with pytest.raises(UserError, match=r"^t with its drafter needs about [\d.]+ MB in int8 \(target\) and bfloat16 "
                                        r"\(drafter\) but this machine has 0.0 MB available; try a smaller model"):
        memory.check_fits("t", [(configs[0], "int8"), (configs[1], "bfloat16")], "cpu")


def test_from_models_reports_what_the_user_loaded(folders):
    from torchao.quantization import Int8WeightOnlyConfig, quantize_
    target = gemma_target().to(torch.bfloat16)
    drafter = gemma_assistant()
    quantize_(drafter, Int8WeightOnlyConfig())  # torchao applied by hand: no config says so
    pair = from_models(target, drafter, word_tokenizer())
    assert pair.precision == {"target": "bfloat16", "drafter": "int8"}
    loaded = transformers.AutoModelForCausalLM.from_pretrained(
        folders[0], quantization_config=transformers.TorchAoConfig(quant_type=Int8WeightOnlyConfig()))
    assert precision_of(loaded) == "int8"
    assert from_models(loaded, None, word_tokenizer()).precision == {"target": "int8", "drafter": None}


# A real import failure: sys.modules[name] = None makes `import torchao` raise ImportError
WITHOUT_TORCHAO = "import sys; sys.modules['torchao'] = None\n"


def run_without_torchao(code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", WITHOUT_TORCHAO + code], capture_output=True, text=True,
                          cwd=ROOT, timeout=240, env={**os.environ, "HF_HUB_OFFLINE": "1"})


def test_without_torchao_floats_load_and_int8_is_one_sentence():
    done = run_without_torchao(
        "from mtp_viz.errors import UserError\n"
        "from mtp_viz.sources.models import load_pair\n"
        "print(load_pair('tiny', dtype='bfloat16').precision)\n"
        "try:\n    load_pair('tiny', drafter_precision='int8')\n"
        "except UserError as e:\n    print(e)\n")
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        "{'target': 'bfloat16', 'drafter': 'bfloat16'}",
        "int8 needs the torchao package, which is not installed: pip install torchao (or mtp-viz[quant])."]


def test_load_pairs_loads_each_model_once_per_precision(folders):
    from mtp_viz.sources.models import load_pairs
    pairs = load_pairs(str(folders[0]), None, [Precision("float32", "float32"), Precision("float32", "int8"),
                                               Precision("int8", "float32")])
    assert [p.precision for p in pairs] == [{"target": "float32", "drafter": "float32"},
                                            {"target": "float32", "drafter": "int8"},
                                            {"target": "int8", "drafter": "float32"}]
    assert pairs[0].target is pairs[1].target and pairs[0].drafter_model is pairs[2].drafter_model
    assert pairs[2].target is not pairs[0].target and pairs[1].drafter_model is not pairs[0].drafter_model
    assert getattr(pairs[0].target.config, "quantization_config", None) is None  # its own config, unquantized


def test_on_zerogpu_nothing_is_probed_on_cuda(monkeypatch):
    """ZeroGPU attaches no GPU outside spaces.GPU and CUDA must stay uninitialised there:
    the precision is taken as asked and the load says what fails."""
    import types

    from torchao.quantization import Int8WeightOnlyConfig

    from mtp_viz.sources import precision
    monkeypatch.setitem(sys.modules, "spaces", types.ModuleType("spaces"))
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: False)
    monkeypatch.setattr(precision, "_runs", lambda *a: pytest.fail("probed CUDA on ZeroGPU"))
    assert precision.quant_type("bfloat16", "cuda") is None
    assert isinstance(precision.quant_type("int8", "cuda"), Int8WeightOnlyConfig)


def test_in_int8_the_output_head_is_int8_too_but_a_clustered_assistant_keeps_its_own(tmp_path):
    """precision.int8_head: the target's head in int8 (a step reads all of it), untied from the
    embedding's float table; an assistant with a clustered head gathers rows of the weight
    itself, so it keeps it. The memory estimate counts both as they load, and both decode."""
    pytest.importorskip("torchao")
    from factories import save_pair
    folders = save_pair(tmp_path, gemma_target(), gemma_assistant(ordered=True), word_tokenizer())
    pair = load_pair(str(folders[0]), drafter=str(folders[1]), dtype="int8")
    target, drafter = pair.target, pair.drafter_model
    assert type(target.lm_head.weight).__name__ == "Int8Tensor"
    assert type(target.get_input_embeddings().weight) is torch.nn.Parameter
    assert drafter.masked_embedding is not None and type(drafter.lm_head.weight) is torch.nn.Parameter
    for folder, model in zip(folders, (target, drafter)):
        cfg = transformers.AutoConfig.from_pretrained(folder)
        assert memory.weight_bytes(cfg, torch.float32, 8) == real_bytes(model)
    events = list(pair.generate("w10 w11", max_new_tokens=8, chat=False, draft_tokens=3))
    assert events[-1].new_tokens == 8
