"""Every bad flag of `mtp-viz bench` (and `generate`) is one sentence on stderr and exit
status 2 before any model loads, and the bench's output folder is checked before its
first run: a folder that cannot take the results is refused, an earlier bench's results
are overwritten only with --force.

The refusals name a target that does not exist: had a model started loading, the
sentence would be that one ("There is no loadable model folder ...") instead."""
import json
import os
import re

import pytest

from factories import save_gemma_pair
from mtp_viz.cli import bench_report
from mtp_viz.cli.main import main

NO_MODEL = "/no/such/model"
LOADED = "There is no loadable model folder at /no/such/model."
SERVER = "http://127.0.0.1:9"


def one_sentence(err: str) -> str:
    """stderr as the one sentence it must be."""
    assert err.count("\n") == 1 and err.endswith("\n"), err
    line = err.strip()
    assert line.startswith("mtp-viz: error: ") and line.endswith(".") and "Traceback" not in line, line
    assert not re.search(r"\.\s+[A-Z]", line), line  # no second sentence
    return line


@pytest.mark.parametrize("argv, message", [
    (["--repeats", "0"], "--repeats must be a whole number from 1 to 100."),
    (["--repeats", "101"], "--repeats must be a whole number from 1 to 100."),
    (["--threads", "-4"], "--threads must be a whole number from 0 to"),
    (["--threads", str((os.cpu_count() or 1) + 1)], "--threads must be a whole number from 0 to"),
    (["--max-draft-tokens", "-1"], "--max-draft-tokens must be a whole number from 1 to 16."),
    (["--max-draft-tokens", "17"], "--max-draft-tokens must be a whole number from 1 to 16."),
    (["--per-category", "-1"], "--per-category must be a whole number of at least 0 (0: every prompt)."),
    (["--temperature", "-1"], "Temperature must be a finite number, 0 (greedy) or positive."),
    (["--temperature", "nan"], "Temperature must be a finite number, 0 (greedy) or positive."),
    (["--temperature", "inf"], "Temperature must be a finite number, 0 (greedy) or positive."),
    (["--temperature", "0.7", "--seed", "-1"], "The seed must be a whole number from 0 to"),
    (["--draft-tokens", "100000"], "Draft tokens must be a whole number between 1 and 16."),
    (["--draft-tokens", "2,0"], "Draft tokens must be a whole number between 1 and 16."),
    (["--draft-tokens", ","], "--draft-tokens must list draft lengths, like 1,2,4,8."),
    (["--schedules", ","], "--schedules must list schedules, like constant,"),
    (["--max-new-tokens", "10000000"], "Max new tokens must be between 1 and 8192."),
    (["--max-new-tokens", "0"], "Max new tokens must be between 1 and 8192."),
    (["--quick", "--max-new-tokens", "0"], "Max new tokens must be between 1 and 8192."),
    (["--concurrency", "1,2"], "--concurrency applies to a vLLM server bench; give --server URL"),
    (["--requests", "0"], "--requests applies to a vLLM server bench; give --server URL"),
    (["--model", "m"], "--model applies to a vLLM server bench; give --server URL"),
    (["--baseline-model", "m"], "--baseline-model applies to a vLLM server bench; give --server URL"),
    (["--server", SERVER, "--baseline-server", SERVER, "--concurrency", "1,2", "--requests", "0"],
     "--requests must be a whole number from 1 to 256."),
    (["--server", SERVER, "--baseline-server", SERVER, "--concurrency", "1,2", "--requests", "257"],
     "--requests must be a whole number from 1 to 256."),
    (["--server", SERVER, "--requests", "8"], "--requests sets the requests per level of --concurrency; "
                                              "give --concurrency too."),
    (["--server", SERVER, "--dtype", "bfloat16"], "--dtype applies to the local engine; a vLLM server's"),
    (["--server", SERVER, "--precisions", "int8/int8"], "--precisions applies to the local engine"),
    (["--server", SERVER, "--compile"], "--compile applies to the local engine; a vLLM server's drafter, draft "
                                        "length, precision, compilation and threads are set when it starts."),
    (["--server", SERVER, "--threads", "1"], "--threads applies to the local engine"),
    (["--server", SERVER, "--schedules", "constant"], "--schedules applies to the local engine"),
    (["--server", SERVER, "--max-draft-tokens", "4"], "--max-draft-tokens applies to the local engine"),
    (["--server", SERVER, "--max-new-tokens", "10000000"], "Max new tokens must be between 1 and 8192."),
    (["--server", SERVER, "--temperature", "-1"], "Temperature must be a finite number, 0 (greedy) or positive."),
])
def test_a_bad_bench_flag_is_one_sentence_before_anything_loads(argv, message, tmp_path, capsys):
    out = tmp_path / "out"
    assert main(["bench", "--target", NO_MODEL, "--no-progress", "--out", str(out), *argv]) == 2
    line = one_sentence(capsys.readouterr().err)
    assert message in line and LOADED not in line
    assert not out.exists()  # refused before the output folder was made


@pytest.mark.parametrize("argv, message", [
    (["--max-new-tokens", "10000000"], "Max new tokens must be between 1 and 8192."),
    (["--max-new-tokens", "0"], "Max new tokens must be between 1 and 8192."),
])
def test_a_bad_generate_flag_is_one_sentence_before_anything_loads(argv, message, capsys):
    assert main(["generate", "--target", NO_MODEL, "--prompt", "def f(x):", *argv]) == 2
    line = one_sentence(capsys.readouterr().err)
    assert message in line and LOADED not in line


def test_out_under_a_file_or_dev_null_is_one_sentence(tmp_path, capsys):
    a_file = tmp_path / "notes.txt"
    a_file.write_text("mine\n")
    for out, message in ((a_file / "results", f"--out {a_file / 'results'} is under {a_file}, which is a "
                                               "file, not a folder."),
                         ("/dev/null/x", "--out /dev/null/x is under /dev/null, which is a file, not a folder."),
                         (a_file, f"--out {a_file} is a file, not a folder.")):
        assert main(["bench", "--target", NO_MODEL, "--out", str(out)]) == 2
        assert one_sentence(capsys.readouterr().err) == f"mtp-viz: error: {message}"
    assert a_file.read_text() == "mine\n"


def earlier_results(folder):
    folder.mkdir()
    (folder / "bench.json").write_text('{"earlier": true}\n')
    (folder / "notes.txt").write_text("mine\n")
    return folder


def test_earlier_results_need_force(tmp_path, capsys):
    out = earlier_results(tmp_path / "results")
    assert main(["bench", "--target", NO_MODEL, "--out", str(out)]) == 2
    assert one_sentence(capsys.readouterr().err) == (
        f"mtp-viz: error: --out {out} already holds a bench's results (bench.json); pass --force to overwrite "
        "them, or choose another folder.")
    assert (out / "bench.json").read_text() == '{"earlier": true}\n'
    assert sorted(p.name for p in out.iterdir()) == ["bench.json", "notes.txt"]


def test_a_busy_machine_does_not_add_a_line_to_a_refusal(tmp_path, capsys, monkeypatch):
    """The busy-machine warning comes once the bench is about to time, so a bench that
    stops before that (a CI runner under load, here a load of 64) still says one sentence."""
    monkeypatch.setattr(os, "getloadavg", lambda: (64.0, 64.0, 64.0))
    assert main(["bench", "--target", NO_MODEL, "--out", str(tmp_path / "out")]) == 2
    assert one_sentence(capsys.readouterr().err) == f"mtp-viz: error: {LOADED}"


def test_a_bench_that_stops_leaves_out_as_it_was(tmp_path, capsys):
    """A bench that stops without results (here its model does not load) keeps the
    earlier results --force would have overwritten, and removes the folders it made for
    --out before its first run."""
    out = earlier_results(tmp_path / "results")
    assert main(["bench", "--target", NO_MODEL, "--out", str(out), "--force"]) == 2
    assert one_sentence(capsys.readouterr().err) == f"mtp-viz: error: {LOADED}"
    assert (out / "bench.json").read_text() == '{"earlier": true}\n'
    new = tmp_path / "new" / "deeper"
    assert main(["bench", "--target", NO_MODEL, "--out", str(new), "--force"]) == 2
    assert one_sentence(capsys.readouterr().err) == f"mtp-viz: error: {LOADED}"
    assert not (tmp_path / "new").exists()


def test_force_overwrites_earlier_results(tmp_path, capsys):
    target, drafter = save_gemma_pair(tmp_path / "pair")
    out = earlier_results(tmp_path / "results")
    code = main(["bench", "--target", str(target), "--drafter", str(drafter), "--quick", "--no-chat",
                 "--no-progress", "--categories", "code", "--max-new-tokens", "4", "--draft-tokens", "2",
                 "--schedules", "constant", "--threads", "1", "--out", str(out), "--force"])
    assert code == 0, capsys.readouterr().err
    result = json.loads((out / "bench.json").read_text())
    assert "earlier" not in result and result["meta"]["max_new_tokens"] == 4
    assert "constant-2" in (out / "bench.md").read_text() and (out / "bench.html").exists()
    assert sorted(p.name for p in out.iterdir()) == ["bench.html", "bench.json", "bench.md", "notes.txt"]


def test_results_that_cannot_go_to_out_go_to_a_temporary_folder(tmp_path):
    """--out was fine before the run but is gone when the results are written: they go to a
    fresh temporary folder, and the sentence says where."""
    out = tmp_path / "gone"
    paths, sentence = bench_report.save(out, {"bench.json": "{}\n", "bench.md": "# bench\n"})
    spare = paths[0].parent
    assert [p.name for p in paths] == ["bench.json", "bench.md"] and spare != out and not out.exists()
    assert (spare / "bench.json").read_text() == "{}\n" and (spare / "bench.md").read_text() == "# bench\n"
    assert sentence == f"Cannot write in --out {out} (no such file or directory); the results are in {spare} instead."
    for p in paths:
        p.unlink()
    spare.rmdir()
