"""The memory check before a load: the estimate from the config is the real models'
parameter bytes, float32 is twice bfloat16, the free memory is read from the kernel's
own files, and a pair that will not fit is one sentence before any weight loads."""
import pytest
import torch
import transformers

from factories import (
    gemma_assistant,
    gemma_multimodal,
    gemma_target,
    save_gemma_pair,
    unified_assistant,
    unified_target,
)
from mtp_viz.errors import UserError
from mtp_viz.sources import memory
from mtp_viz.sources.models import load_pair

BUILDERS = {"target": gemma_target, "clustered assistant": lambda: gemma_assistant(ordered=True),
            "moe wrapper": lambda: gemma_multimodal(moe=True), "unified wrapper": unified_target,
            "unified assistant": unified_assistant}


def real_bytes(*models):
    return sum(p.numel() * p.element_size() for m in models for p in m.parameters())


@pytest.mark.parametrize("kind", list(BUILDERS))
def test_the_estimate_is_the_real_models_parameter_bytes(kind):
    model = BUILDERS[kind]()
    f32 = memory.weight_bytes(model.config, torch.float32)
    assert f32 == real_bytes(model)  # built in float32
    bf16 = memory.weight_bytes(model.config, torch.bfloat16)
    assert bf16 == real_bytes(model.to(torch.bfloat16)) and f32 == 2 * bf16


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    return save_gemma_pair(tmp_path_factory.mktemp("fit"))


def fake_meminfo(monkeypatch, tmp_path, available_bytes):
    """The kernel's /proc/meminfo as it reads on Linux, with ``MemAvailable`` forced."""
    path = tmp_path / "meminfo"
    path.write_text(f"MemTotal:       24683656 kB\nMemFree:         1000000 kB\n"
                    f"MemAvailable:   {available_bytes // 1024:8d} kB\nBuffers:           12345 kB\n")
    monkeypatch.setattr(memory, "MEMINFO", str(path))
    monkeypatch.setattr(memory, "CGROUPS", ())


def test_the_check_counts_target_and_drafter(folders):
    configs = [transformers.AutoConfig.from_pretrained(f) for f in folders]
    pair = load_pair(str(folders[0]))
    assert memory.check_fits("t", [(c, "float32") for c in configs], "cpu") == \
        real_bytes(pair.target, pair.drafter_model)


def test_a_pair_that_does_not_fit_is_refused_before_any_weight_loads(folders, monkeypatch, tmp_path):
    need = real_bytes(gemma_target(), gemma_assistant())  # float32, as on this CPU by default
    fake_meminfo(monkeypatch, tmp_path, need // 2 + 4096)  # room for bf16, not for float32

    def refuse(*args, **kwargs):
        raise AssertionError("weights were loaded")
    monkeypatch.setattr(transformers.AutoModelForCausalLM, "from_pretrained", refuse)
    with pytest.raises(UserError) as e:
        load_pair(str(folders[0]))
    assert str(e.value) == (f"{folders[0]} with its drafter needs about {need / 1e6:.1f} MB in float32 but this "
                            f"machine has {(need // 2 + 4096) // 1024 * 1024 / 1e6:.1f} MB available; try dtype "
                            "bfloat16, a GPU, or the tiny pair.")
    monkeypatch.undo()
    fake_meminfo(monkeypatch, tmp_path, need // 2 + 4096)
    pair = load_pair(str(folders[0]), dtype="bfloat16")  # half the bytes: it fits
    assert pair.target.dtype == torch.bfloat16 and real_bytes(pair.target, pair.drafter_model) == need // 2
    target_alone = real_bytes(gemma_target()) // 2  # in bfloat16
    fake_meminfo(monkeypatch, tmp_path, (target_alone + need // 2) // 2)  # room for the target, not the pair
    with pytest.raises(UserError, match=r"in bfloat16 but .* available; try a smaller model, a GPU, or the tiny"):
        load_pair(str(folders[0]), dtype="bf16")
    assert load_pair(str(folders[0]), drafter_kind="lookup", dtype="bf16").drafter_model is None


def test_free_memory_is_read_from_the_kernel_and_the_cgroup(monkeypatch, tmp_path):
    total = int(open("/proc/meminfo").read().split("MemTotal:")[1].split()[0]) * 1024
    assert 0 < memory.available_bytes("cpu") <= total
    fake_meminfo(monkeypatch, tmp_path, 8 * 1024 ** 3)
    assert memory.cpu_available() == 8 * 1024 ** 3
    cg = tmp_path / "cg"
    cg.mkdir()
    (cg / "memory.max").write_text("4000000000\n")
    (cg / "memory.current").write_text("3000000000\n")
    (cg / "memory.stat").write_text("anon 2000000000\nfile 1000000000\ninactive_file 500000000\n")
    monkeypatch.setattr(memory, "CGROUPS", ((str(cg / "memory.max"), str(cg / "memory.current"), "inactive_file"),))
    # the container's limit less what it holds, reclaimable page cache not counted: 4 − (3 − 0.5) GB
    assert memory.cpu_available() == 1_500_000_000
    (cg / "memory.max").write_text("max\n")  # no limit: the kernel's figure
    assert memory.cpu_available() == 8 * 1024 ** 3
    assert memory.available_bytes("mps") is None  # unknown: nothing is checked
    if not torch.cuda.is_available():
        assert memory.available_bytes("cuda") is None  # no such device: loading gives the sentence


def test_no_check_without_a_figure_or_for_a_quantized_checkpoint(monkeypatch):
    cfg = gemma_target().config
    monkeypatch.setattr(memory, "available_bytes", lambda device: 1)
    with pytest.raises(UserError, match="needs about 0.8 MB in float32 but the cuda:1 device has 0.0 MB available; "
                                        "try dtype bfloat16, a GPU with more memory, or the tiny pair."):
        memory.check_fits("t", [(cfg, "float32")], "cuda:1")
    cfg.quantization_config = {"quant_method": "torchao"}
    assert memory.check_fits("t", [(cfg, "float32")], "cpu") is None
    monkeypatch.setattr(memory, "available_bytes", lambda device: None)
    assert memory.check_fits("t", [(gemma_target().config, "float32")], "mps") == real_bytes(gemma_target())


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_free_memory_on_cuda_is_the_devices():
    free, total = torch.cuda.mem_get_info()
    assert 0 < memory.available_bytes("cuda") <= total and abs(memory.available_bytes("cuda:0") - free) < 2 ** 30
