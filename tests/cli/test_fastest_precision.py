"""The precision fastest on the machine (issue 52, item 2): where the CPU has no native
bfloat16 (imitated with ``MTP_VIZ_KERNEL_ISA=avx2``), the machine line, `mtp-viz profile`,
the bench and the app's precision field say so; a profile of a random shape given no
precision runs in int8 weight-only, lossless against its own plain decoding; the bundled
tiny pair keeps float32."""
import json
import os
import shutil
import subprocess
import sys

import pytest

from locations import ROOT
from mtp_viz.cli.main import main
from mtp_viz.sources import precision
from mtp_viz.sources.presets import model_path, resolve

NO_BF16 = "This CPU has no native bfloat16 (AVX2): bfloat16 weights are widened to float32 as they are read"
FLAGS = ["--repeats", "1", "--max-draft-tokens", "2", "--draft-tokens", "2", "--max-new-tokens", "10",
         "--prompt-tokens", "8"]


@pytest.fixture
def avx2(monkeypatch):
    """A CPU without native bfloat16, as the engine's kernel is capped to imitate one."""
    monkeypatch.setenv("MTP_VIZ_KERNEL_ISA", "avx2")


@pytest.fixture(scope="module")
def shape(tmp_path_factory):
    """The bundled pair's shape as a folder and its '-assistant' sibling (configs only): a
    random-weights target that is not the tiny preset."""
    root = tmp_path_factory.mktemp("shape")
    for src, dst in zip(resolve("tiny"), ("pair", "pair-assistant")):
        (root / dst).mkdir()
        shutil.copy(os.path.join(model_path(src), "config.json"), root / dst / "config.json")
    return root / "pair"


def test_without_native_bfloat16_int8_is_fastest_and_the_sentence_says_why(avx2, monkeypatch):
    best = precision.fastest("cpu")
    assert (best.precision, best.native_bfloat16) == ("int8", False)
    assert best.why == NO_BF16 + ", and int8 weight-only (computing in float32) is the fastest precision here."
    monkeypatch.setitem(sys.modules, "torchao", None)   # torchao missing: float32, and what int8 needs
    best = precision.fastest("cpu")
    assert best.precision == "float32" and "pip install torchao" in best.why
    assert precision.fastest("cuda") == precision.Fastest("bfloat16", True,
                                                          "The cuda device computes bfloat16 natively.")


def test_the_machine_line_says_whether_bfloat16_is_native(avx2, monkeypatch):
    from mtp_viz.measure import machine
    m = machine.machine()
    assert m["native_bfloat16"] is False and "no native bfloat16 (AVX2)" in machine.line(m)
    monkeypatch.setattr(precision, "cpu_isa", lambda: 4)
    m = machine.machine()
    assert m["native_bfloat16"] is True and "native bfloat16 (AMX)" in machine.line(m)


def test_a_random_shape_profiles_in_int8_where_bfloat16_is_not_native(avx2, shape, tmp_path):
    assert main(["profile", "--target", str(shape), "--weights", "random", *FLAGS, "--alphas", "0.5,0.9",
                 "--out", str(tmp_path)]) == 0
    r, md = json.loads((tmp_path / "profile.json").read_text()), (tmp_path / "profile.md").read_text()
    choice = r["meta"]["precision_choice"]
    assert choice["chosen_by"] == "machine" and choice["fastest"] == "int8" and choice["why"].startswith(NO_BF16)
    assert r["meta"]["precision"] == "target int8, drafter int8"
    assert f"Precision int8, the fastest on this machine (none was given). {choice['why']}" in md
    assert "no native bfloat16 (AVX2)" in r["meta"]["machine_line"]
    runs = r["engines"]["eager"]["runs"]
    assert runs and all(run["same_tokens"] for run in runs)   # int8 computes in float32: lossless


def test_a_random_shape_profiles_in_bfloat16_where_it_is_native(shape, tmp_path, monkeypatch):
    monkeypatch.setattr(precision, "cpu_isa", lambda: 4)
    assert main(["profile", "--target", str(shape), "--weights", "random", *FLAGS, "--alphas", "",
                 "--out", str(tmp_path)]) == 0
    r = json.loads((tmp_path / "profile.json").read_text())
    assert r["meta"]["precision_choice"]["chosen_by"] == "machine"
    assert r["meta"]["precision"] == "target bfloat16, drafter bfloat16"
    assert "This CPU computes bfloat16 natively (AMX)." in (tmp_path / "profile.md").read_text()


@pytest.mark.parametrize("target, flags, chosen_by, held", [
    ("tiny", ["--weights", "random"], "default", "target float32, drafter float32"),   # the tiny pair keeps float32
    (None, ["--weights", "random", "--dtype", "float32"], "asked", "target float32, drafter float32"),
])
def test_the_tiny_pair_and_an_asked_precision_keep_theirs_and_say_the_fastest(avx2, shape, tmp_path, target, flags,
                                                                              chosen_by, held):
    assert main(["profile", "--target", target or str(shape), *flags, *FLAGS, "--alphas", "",
                 "--out", str(tmp_path)]) == 0
    r, md = json.loads((tmp_path / "profile.json").read_text()), (tmp_path / "profile.md").read_text()
    assert r["meta"]["precision_choice"]["chosen_by"] == chosen_by and r["meta"]["precision"] == held
    assert "the fastest on this machine is int8" in md and NO_BF16 in md


@pytest.mark.parametrize("native", [False, True])
def test_the_bench_says_so_where_bfloat16_is_not_native(avx2, monkeypatch, capsys, tmp_path, native):
    if native:
        monkeypatch.setattr(precision, "cpu_isa", lambda: 3)
    assert main(["bench", "--target", "tiny", "--quick", "--no-chat", "--no-progress", "--categories", "code",
                 "--max-new-tokens", "4", "--schedules", "constant", "--draft-tokens", "2", "--repeats", "1",
                 "--threads", "1", "--out", str(tmp_path)]) == 0
    err, md = capsys.readouterr().err, (tmp_path / "bench.md").read_text()
    meta = json.loads((tmp_path / "bench.json").read_text())["meta"]
    assert meta["precisions"] == ["float32/float32"]        # the bench's precision stays the device's default
    if native:
        assert meta["precision_note"] is None and "This CPU has no native" not in err + md
        assert "native bfloat16 (AVX-512 BF16)" in meta["machine_line"]
    else:
        assert meta["precision_note"].startswith(NO_BF16) and f"mtp-viz bench: {meta['precision_note']}" in err
        assert meta["precision_note"] in md and "no native bfloat16 (AVX2)" in meta["machine_line"]


APP = """
import sys
from mtp_viz.app.page import layout
cfg = layout.build_demo(target="tiny").get_config_file()
print(next(c["props"]["info"] for c in cfg["components"] if c["props"].get("elem_id") == "target-precision"))
print("torch" in sys.modules)
"""


@pytest.mark.parametrize("isa, says", [("avx2", True), ("", False)])
def test_the_apps_precision_field_says_so_without_importing_torch(isa, says):
    if not isa and precision.cpu_isa() < precision.NATIVE_BFLOAT16_ISA:
        pytest.skip("this CPU has no native bfloat16")
    env = {**os.environ, "MTP_VIZ_KERNEL_ISA": isa, "HF_HUB_OFFLINE": "1", "GRADIO_ANALYTICS_ENABLED": "False"}
    done = subprocess.run([sys.executable, "-c", APP], capture_output=True, text=True, cwd=ROOT, timeout=300, env=env)
    assert done.returncode == 0, done.stderr[-2000:]
    info, torch_imported = done.stdout.splitlines()[-2:]
    assert info.startswith("default: MTP_VIZ_DTYPE, else float32 on a CPU") and (NO_BF16 in info) == says
    assert torch_imported == "False"
