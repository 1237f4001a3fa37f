"""`mtp-viz generate` end to end on a saved random pair: styled text, JSON lines, errors."""
import json
import subprocess
import sys

import pytest
import torch

from factories import llama, save_gemma_pair, save_moe_pair, word_tokenizer
from mtp_viz.cli.main import main
from mtp_viz.engine.events import event_from_dict

PROMPT = " ".join(f"w{i}" for i in range(10, 40))


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    return save_gemma_pair(tmp_path_factory.mktemp("pair"))


def test_jsonl_is_one_event_per_line(pair, capsys):
    target, _ = pair
    assert main(["generate", "--target", str(target), "--prompt", PROMPT, "--max-new-tokens", "12",
                 "--jsonl"]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    events = [event_from_dict(json.loads(line)) for line in lines]
    assert events[0].type == "start" and events[-1].type == "done"
    assert events[0].settings["drafter"] == "mtp"  # the sibling '<target>-assistant' folder
    assert events[-1].new_tokens == 12
    assert {e.type for e in events} >= {"drafted", "step", "bonus"}


def test_autoregressive_and_lookup_give_the_same_text(pair, capsys):
    target, _ = pair
    outs = []
    for extra in (["--autoregressive"], ["--prompt-lookup"], []):
        assert main(["generate", "--target", str(target), "--prompt", PROMPT,
                     "--max-new-tokens", "10", "--jsonl", *extra]) == 0
        done = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
        outs.append(done["generated_ids"])
    assert outs[0] == outs[1] == outs[2]


def test_styled_output_and_summary(pair, capsys):
    target, _ = pair
    assert main(["generate", "--target", str(target), "--prompt", PROMPT, "--max-new-tokens", "8",
                 "--color", "always"]) == 0
    out = capsys.readouterr().out
    assert "\x1b[" in out and "\x1b[2;9;31m" in out  # rejected drafts struck through
    assert "8 new tokens" in out.splitlines()[-1] and "tokens/s" in out.splitlines()[-1]


@pytest.mark.parametrize("argv, message", [
    (["--target", "/no/such/folder"], "There is no loadable model folder at /no/such/folder."),
    (["--target", "/root/.ssh"], "There is no loadable model folder at /root/.ssh."),
    (["--max-new-tokens", "0"], "Max new tokens must be between 1 and 8192."),
    (["--max-new-tokens", "10000000"], "Max new tokens must be between 1 and 8192."),
    (["--max-new-tokens", "lots"], "argument --max-new-tokens: invalid int value: 'lots'"),
    (["--schedule", "fastest"], "Unknown schedule 'fastest'"),
    (["--draft-tokens", "99"], "Draft tokens must be a whole number between 1 and 16."),
    (["--temperature", "-1"], "Temperature must be a finite number, 0 (greedy) or positive."),
    (["--temperature", "nan"], "Temperature must be a finite number"),
    (["--temperature", "inf"], "Temperature must be a finite number"),
    (["--temperature", "0.7", "--top-p", "nan"], "Top-p must be a number in (0, 1]."),
    (["--temperature", "0.7", "--top-k", "-1"], "Top-k must be a whole number"),
    (["--seed", "1e30"], "argument --seed: invalid int value: '1e30'"),
    (["--seed", str(2**64)], "The seed must be a whole number from 0 to 9223372036854775807."),
    (["--temperature", "0.7", "--seed", "-1"], "The seed must be a whole number from 0"),
    (["--prompt", "w10 \udcff"], "The prompt is not valid UTF-8 text."),
    (["--prompt", "w10 " * 5000], "exceeds the model's context of"),
    (["--drafter", "/no/such/drafter"], "There is no loadable model folder at /no/such/drafter."),
    (["--dtype", "fp8"], "Unknown dtype 'fp8'; use float32, bfloat16, float16, int8 or int4."),
    (["--drafter-precision", "int3"],
     "Unknown drafter precision 'int3'; use float32, bfloat16, float16, int8 or int4."),
    (["--target-precision", "int4"], "int4 has no kernel on this CPU (torchao "),
    (["--target-precision", "int8", "--server", "http://127.0.0.1:9"], "--target-precision applies to the local "
     "engine"),
    (["--experts"], "This target is dense: every token uses the same weights, so there are no experts to "
                    "count; counting experts needs a mixture-of-experts target such as the 26B-A4B."),
    (["--experts", "--autoregressive"], "This target is dense: every token uses the same weights"),
    (["--experts", "--server", "http://127.0.0.1:9"], "--experts applies to the local engine: a vLLM server "
                                                      "does not report which experts its router chose."),
])
def test_user_errors_exit_2_with_one_line(pair, argv, message, capsys):
    target, _ = pair
    base = ["generate", "--target", str(target), "--prompt", PROMPT]
    assert main(base + argv) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1 and "Traceback" not in err
    assert not err.endswith("..")
    assert main(base + ["--max-new-tokens", "2", "--jsonl"]) == 0  # and the next run works


@pytest.mark.parametrize("mode", [[], ["--autoregressive"]])
def test_experts_on_a_mixture_of_experts_target(tmp_path, mode, capsys):
    """``--experts``: every step event carries the distinct experts per layer; the tokens
    are those of a run without it."""
    target, _ = save_moe_pair(tmp_path)
    base = ["generate", "--target", str(target), "--prompt", PROMPT, "--max-new-tokens", "8", "--jsonl", *mode]
    runs = []
    for extra in (["--experts"], []):
        assert main(base + extra) == 0
        runs.append([json.loads(line) for line in capsys.readouterr().out.splitlines()])
    counted, plain = runs
    assert counted[0]["settings"]["experts"] == {"layers": 4, "num_experts": 8, "top_k": 2, "counted": True}
    steps = [d for d in counted if d["type"] == "step"]
    assert steps and all(len(d["experts_per_layer"]) == 4 for d in steps)
    assert not any("experts_per_layer" in d for d in plain)
    assert counted[-1]["generated_ids"] == plain[-1]["generated_ids"]


def test_dtype_reaches_the_load(pair, capsys, monkeypatch):
    """``--dtype bfloat16`` loads the pair in bfloat16 (half of float32's memory on a CPU)."""
    from mtp_viz.sources import models
    loaded = []
    real = models.load_pair
    monkeypatch.setattr(models, "load_pair", lambda *a, **kw: loaded.append(real(*a, **kw)) or loaded[-1])
    target, _ = pair
    assert main(["generate", "--target", str(target), "--prompt", PROMPT, "--max-new-tokens", "4", "--jsonl",
                 "--dtype", "bfloat16"]) == 0
    assert json.loads(capsys.readouterr().out.splitlines()[-1])["new_tokens"] == 4
    assert [(p.target.dtype, p.drafter_model.dtype) for p in loaded] == [(torch.bfloat16, torch.bfloat16)]


def test_each_models_precision_reaches_the_load_and_the_trace(pair, capsys):
    """``--target-precision`` / ``--drafter-precision`` win over ``--dtype`` for their model,
    and the start event says what ran."""
    target, _ = pair
    assert main(["generate", "--target", str(target), "--prompt", PROMPT, "--max-new-tokens", "4", "--jsonl",
                 "--dtype", "bfloat16", "--drafter-precision", "int8"]) == 0
    start = json.loads(capsys.readouterr().out.splitlines()[0])
    assert (start["settings"]["target_precision"], start["settings"]["drafter_precision"]) == ("bfloat16", "int8")


def test_empty_prompt(pair, capsys):
    target, _ = pair
    assert main(["generate", "--target", str(target), "--prompt", "  "]) == 2
    assert capsys.readouterr().err.strip() == "mtp-viz: error: The prompt is empty."


def test_mtp_drafter_with_non_gemma_target(pair, tmp_path, capsys):
    _, assistant = pair
    folder = tmp_path / "llama"
    llama(512).save_pretrained(folder)
    word_tokenizer(512).save_pretrained(folder)
    assert main(["generate", "--target", str(folder), "--drafter", str(assistant),
                 "--prompt", PROMPT]) == 2
    assert "needs a Gemma 4 target" in capsys.readouterr().err


def test_vocabulary_mismatch(pair, tmp_path, capsys):
    target, _ = pair
    folder = tmp_path / "small"
    llama(256).save_pretrained(folder)
    assert main(["generate", "--target", str(target), "--drafter", str(folder),
                 "--prompt", PROMPT]) == 2
    assert "do not share a vocabulary" in capsys.readouterr().err


def test_unknown_hub_id_offline(capsys, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr("huggingface_hub.constants.HF_HUB_OFFLINE", True)  # read at import
    assert main(["generate", "--target", "nobody/no-such-model", "--prompt", "hi"]) == 2
    err = capsys.readouterr().err
    assert "nobody/no-such-model" in err and len(err.strip().splitlines()) == 1


def test_a_misspelt_name_is_refused_at_once_naming_the_closest_preset():
    """Where the Hub cannot be reached (here: an endpoint nobody listens on, so the
    connection is refused as on a machine without internet), a name that is neither a
    preset, a folder nor cached is one sentence within seconds, not tens of seconds of
    retries, and it names the preset meant."""
    import os

    from locations import ROOT
    env = {k: v for k, v in os.environ.items() if k != "HF_HUB_OFFLINE"}
    done = subprocess.run([sys.executable, "-m", "mtp_viz.cli.main", "generate", "--target", "tinny",
                           "--prompt", "hi"], capture_output=True, text=True, cwd=ROOT, timeout=120,
                          env={**env, "HF_ENDPOINT": "http://127.0.0.1:9"})
    assert done.returncode == 2 and len(done.stderr.strip().splitlines()) == 1
    assert "tinny is not a preset" in done.stderr and "did you mean tiny?" in done.stderr


def test_console_script_runs_as_a_process(pair):
    target, _ = pair
    proc = subprocess.run([sys.executable, "-m", "mtp_viz.cli.main", "generate", "--target", str(target),
                           "--prompt", PROMPT, "--max-new-tokens", "4", "--jsonl"],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    events = [event_from_dict(json.loads(line)) for line in proc.stdout.splitlines()]
    assert events[0].type == "start" and events[-1].type == "done" and events[-1].new_tokens == 4
    assert sum(e.type in ("accepted", "bonus") for e in events) == 4  # the generated tokens


def test_a_fresh_process_keeps_stderr_to_its_one_sentence():
    """With torchao installed, transformers imports it on every load, and torchao and
    torch then print notices of their own (GPU-only extensions, a deprecation): the
    command still prints only its sentence."""
    import os

    import torchao

    from locations import ROOT
    done = subprocess.run([sys.executable, "-m", "mtp_viz.cli.main", "generate", "--target", "tiny",
                           "--prompt", "import os", "--dtype", "int4"], capture_output=True, text=True, cwd=ROOT,
                          timeout=240, env={**os.environ, "HF_HUB_OFFLINE": "1"})
    assert done.returncode == 2
    assert done.stderr.splitlines() == ["mtp-viz: error: int4 has no kernel on this CPU (torchao "
                                        f"{torchao.__version__}'s int4 weight-only layouts need a "
                                        "CUDA GPU); use int8, bfloat16 or float32."]


def test_the_mtp_viz_command_runs_every_subcommand_ui_included(capsys):
    """`mtp-viz` (pyproject's script, and `python -m mtp_viz`) is mtp_viz.__main__, above the
    front ends: the CLI's generate, replay and bench and the app's ui, with their flags."""
    from locations import ROOT
    from mtp_viz.__main__ import main as command
    assert 'mtp-viz = "mtp_viz.__main__:main"' in (ROOT / "pyproject.toml").read_text()
    assert command(["--help"]) == 0
    listed = capsys.readouterr().out
    assert all(name in listed for name in ("generate", "replay", "bench", "ui"))
    assert command(["ui", "--help"]) == 0
    assert "--share" in capsys.readouterr().out
    proc = subprocess.run([sys.executable, "-m", "mtp_viz", "bench", "--help"], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0 and "--concurrency" in proc.stdout
