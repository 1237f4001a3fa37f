"""A real llama-server as a source (marked ``llamacpp``: `python -m pytest -m llamacpp`;
llama-server from scripts/llamacpp.sh, see tests/real_llamacpp.py), on the bundled pair
exported with `mtp-viz gguf` (f32): one server with the MTP drafter, one plain.

- ``generate --server`` gives llama.cpp's own non-streamed tokens and transformers'
  greedy tokens, in both modes; the rebuilt steps' drafted and accepted counts sum to
  the server's ``draft_n`` and ``draft_n_accepted``;
- the dashboard reads its ``/metrics``: one request's counters are that request's counts;
- ``bench --server --baseline-server`` writes rows for it, with the same tokens.

"""
import json
import subprocess
import sys

import pytest
import torch

from mtp_viz.engine.events import Done, Start, Step
from mtp_viz.paths import assets_dir
from mtp_viz.sources import open_source
from mtp_viz.sources.llamacpp.gguf import export_pair
from mtp_viz.sources.prometheus import delta
from mtp_viz.sources.settings import RunSettings
from real_llamacpp import greedy, llama_server, serving

pytestmark = pytest.mark.llamacpp
N = 48
MTP = ("-md", None, "--spec-type", "draft-mtp", "--spec-draft-n-max", "4", "-td", "1", "-tbd", "1")
PROMPTS = [p["prompt"] for p in json.loads((assets_dir() / "tiny" / "eval_prompts.json").read_text())["prompts"]]


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    llama_server()  # skip before exporting when there is no server
    return export_pair("tiny", None, tmp_path_factory.mktemp("tiny-gguf"), "f32")


@pytest.fixture(scope="module")
def plain(pair):
    with serving(pair.target, "--metrics") as url:
        yield url


@pytest.fixture(scope="module")
def mtp(pair):
    assert pair.notes == []   # the bundled drafter is shaped as llama.cpp's loader wants
    args = [str(pair.drafter) if a is None else a for a in MTP]
    with serving(pair.target, *args, "--metrics") as url:
        yield url


@pytest.fixture(scope="module")
def transformers_greedy():
    """transformers' ids of each prompt and its greedy tokens (until its end of text)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer
    folder = str(assets_dir() / "tiny" / "target")
    tok = AutoTokenizer.from_pretrained(folder)
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()

    def run(prompt: str) -> tuple[list[int], list[int]]:
        ids = tok(prompt).input_ids
        with torch.no_grad():
            new = model.generate(torch.tensor([ids]), do_sample=False, max_new_tokens=N, pad_token_id=0)
        out = new[0, len(ids):].tolist()
        return ids, out[:out.index(1)] if 1 in out else out
    return run


def _generate(spec: str, baseline: str, prompt: str) -> dict[str, list]:
    """`mtp-viz generate --server URL --jsonl` on the speculating server, and with
    ``--autoregressive`` on the plain one: the events by mode."""
    out = {}
    for url, mode in ((spec, []), (baseline, ["--autoregressive"])):
        run = subprocess.run([sys.executable, "-m", "mtp_viz", "generate", "--server", url, "--no-chat-template",
                              "--max-new-tokens", str(N), "--jsonl", "--prompt", prompt, *mode],
                             capture_output=True, text=True, timeout=300)
        assert run.returncode == 0, run.stderr
        events = [json.loads(line) for line in run.stdout.splitlines()]
        out[events[0]["mode"]] = events
    return out


def test_the_plain_server_is_a_baseline_and_refuses_to_speculate(plain, transformers_greedy):
    ids, want = transformers_greedy(PROMPTS[0])
    events = list(open_source(server=plain).events(RunSettings(PROMPTS[0], ("autoregressive",), max_new_tokens=N,
                                                               chat=False)))
    assert isinstance(events[0], Start) and events[0].prompt_ids == tuple(ids)   # the server's ids: transformers'
    assert events[0].ran.engine == "llamacpp" and events[0].ran.label == "llama.cpp server"
    done = events[-1]
    assert isinstance(done, Done) and list(done.generated_ids) == want == greedy(plain, ids, N)["tokens"]
    with pytest.raises(Exception, match="does not speculate"):
        list(open_source(server=plain).events(RunSettings(PROMPTS[0], max_new_tokens=N, chat=False)))


def test_generate_gives_llamacpps_own_tokens_and_transformers(mtp, plain, transformers_greedy):
    for prompt in PROMPTS[:4]:
        ids, want = transformers_greedy(prompt)
        runs = _generate(mtp, plain, prompt)
        spec, ar = (runs[m][-1] for m in ("speculative", "autoregressive"))
        assert spec["type"] == ar["type"] == "done"
        assert spec["generated_ids"] == ar["generated_ids"] == want == greedy(mtp, ids, N)["tokens"]
        assert spec["drafted"] > 0 and runs["speculative"][0]["settings"]["ran"]["engine"] == "llamacpp"


def test_the_rebuilt_steps_sum_to_the_servers_counts(mtp, transformers_greedy):
    source = open_source(server=mtp)
    for prompt in PROMPTS:
        ids, _ = transformers_greedy(prompt)
        events = list(source.events(RunSettings(prompt, ("speculative",), max_new_tokens=N, chat=False)))
        steps = [e for e in events if isinstance(e, Step)]
        timings = greedy(mtp, ids, N)["timings"]   # the same request, not streamed
        assert sum(s.draft_tokens for s in steps) == timings["draft_n"] == events[-1].drafted
        assert sum(s.accepted for s in steps) == timings["draft_n_accepted"] == events[-1].accepted
        assert sum(s.new_tokens for s in steps) == events[-1].new_tokens


def test_the_dashboard_reads_its_metrics(mtp):
    source = open_source(server=mtp)
    before = source.counters(mtp)
    done = list(source.events(RunSettings(PROMPTS[1], ("speculative",), max_new_tokens=N, chat=False)))[-1]
    d = delta(source.counters(mtp), before)
    steps = done.target_forwards - 1   # the prefill drafts nothing
    assert d.enabled and (d.draft_tokens, d.accepted_tokens) == (done.drafted, done.accepted)
    assert d.drafts <= steps and len(d.accepted_per_pos) == 4 and d.accepted_per_pos[0] >= d.accepted_per_pos[-1]


def test_bench_against_the_plain_server(mtp, plain, tmp_path):
    from mtp_viz.__main__ import main
    assert main(["bench", "--server", mtp, "--baseline-server", plain, "--quick", "--no-chat",
                 "--prompts", str(assets_dir() / "tiny" / "eval_prompts.json"), "--per-category", "3",
                 "--out", str(tmp_path)]) == 0
    result = json.loads((tmp_path / "bench.json").read_text())
    sp = result["speculative"]
    assert sp["speedup"] > 0 and sp["same_tokens_as_baseline"] is True and 1 <= sp["tau"] <= 5
    assert result["server_counters"]["verify_steps"] > 0
    m = result["meta"]   # which software answered, as it reports itself (/props' build_info)
    assert m["software"] == "llama.cpp" and m["software_version"].startswith("b") and m["baseline_software_version"]
    md = (tmp_path / "bench.md").read_text()
    assert md.startswith("## mtp-viz bench: llama.cpp server") and f"Software: llama.cpp {m['software_version']}" in md


def _pooled(runs: list[dict], mode: str, setting: str) -> float:
    """The median over repeats of Σ tokens ÷ Σ seconds, from bench.json's runs."""
    import statistics
    by: dict[int, list[float]] = {}
    for r in runs:
        if r["mode"] == mode and r.get("setting", "") == setting:
            t = by.setdefault(r["repeat"], [0.0, 0.0])
            t[0] += r["new_tokens"]
            t[1] += r["seconds"]
    return statistics.median(t / s for t, s in by.values())


def test_bench_with_a_peer_reads_every_row_against_the_fastest_plain_decoder(plain, tmp_path):
    """bench --peer: the plain llama.cpp server runs the same prompts interleaved with the
    local engine; every row's speedup_over_fastest_plain is recomputed here from the runs."""
    from mtp_viz.__main__ import main
    assert main(["bench", "--peer", plain, "--quick", "--no-chat", "--threads", "1", "--repeats", "2",
                 "--prompts", str(assets_dir() / "tiny" / "eval_prompts.json"), "--per-category", "3",
                 "--out", str(tmp_path), "--no-progress"]) == 0
    result = json.loads((tmp_path / "bench.json").read_text())
    [peer] = result["peers"]
    assert (peer["engine"], peer["setting"], peer["same_tokens_as_plain"]) == ("llamacpp", "plain", True)
    runs = result["runs"]
    rates = {"mtp-viz float32": _pooled(runs, "autoregressive", ""), peer["peer"]: _pooled(runs, "peer", peer["peer"])}
    best = max(rates, key=rates.get)
    assert result["fastest_plain"]["decoder"] == best
    assert result["fastest_plain"]["tokens_per_second"] == pytest.approx(rates[best])
    assert peer["speedup_over_fastest_plain"] == pytest.approx(rates[peer["peer"]] / rates[best])
    for row in result["settings"]:
        mine = _pooled(runs, "ours", row["setting"])
        assert row["speedup_over_fastest_plain"] == pytest.approx(mine / rates[best])
    assert "Against the fastest plain decoder measured here" in (tmp_path / "bench.md").read_text()
