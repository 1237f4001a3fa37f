import json
import os
from types import SimpleNamespace

import pytest
import torch

from factories import ScriptDrafter, gemma_assistant, gemma_target, greedy_reference, word_tokenizer
from locations import ROOT
from mtp_viz.analysis import metrics
from mtp_viz.cli import bench
from mtp_viz.engine.sampling import Sampling
from mtp_viz.errors import UserError
from mtp_viz.measure import reduce as reduction
from mtp_viz.measure.records import Record, Setting
from mtp_viz.measure.runner import Runner
from mtp_viz.measure.session import check_parity
from mtp_viz.prompts import category_suite, load_prompts
from mtp_viz.sources.settings import RunSettings


def test_prompt_suite_covers_every_category():
    prompts = load_prompts(None)
    data = json.loads(category_suite().read_text())
    assert len({p.id for p in prompts}) == len(prompts)
    cats = {p.category for p in prompts}
    assert cats == set(data["categories"]) == {
        "code", "structured", "summarization", "translation", "chat", "creative"}
    for c in cats:
        assert sum(p.category == c for p in prompts) >= 2
    assert len(load_prompts(None, per_category=1)) == len(cats)
    assert {p.category for p in load_prompts(None, categories="code,chat")} == {"code", "chat"}


def test_bad_inputs_are_user_errors(tmp_path):
    with pytest.raises(UserError):
        load_prompts(tmp_path / "missing.json")
    with pytest.raises(UserError):
        load_prompts(None, categories="nope")
    with pytest.raises(UserError):
        bench.parse_settings("1,x", "constant", False)
    with pytest.raises(UserError):
        bench.parse_settings("2", "constant,magic", False)
    s = bench.parse_settings("8,1,2,4", "constant,heuristic,optimal", False)
    assert [x.name for x in s] == ["constant-1", "constant-2", "constant-4", "constant-8",
                                   "heuristic-4", "optimal-4"]


def _rec(mode, setting, repeat, seconds, tokens=10, category="code", pid="p1"):
    return Record(mode, seconds, tokens, tokens, setting=setting,
                  schedule=setting.split("-")[0] if setting else "", repeat=repeat,
                  category=category, prompt_id=pid)


def test_speedup_and_overhead_are_medians_of_paired_repeats():
    recs = []
    for r, (ar, ref, ours) in enumerate([(1.0, 0.5, 0.51), (2.0, 1.0, 1.0), (1.0, 0.4, 0.44)]):
        recs += [_rec("autoregressive", "", r, ar), _rec("reference", "constant-2", r, ref),
                 _rec("speculative", "constant-2", r, ours)]
    assert reduction.speedup(recs, "speculative", "constant-2") == pytest.approx(2.0)  # 1.96, 2, 2.27
    assert reduction.speedup(recs, "reference", "constant-2") == pytest.approx(2.0)
    assert reduction.overhead(recs, "constant-2") == pytest.approx(1.02)


def test_a_local_run_is_ours_in_bench_json_and_a_server_run_speculative():
    """bench.json's local runs call our engine's speculative runs "ours" (a contract of
    the file); a server bench's runs keep the sources' mode names."""
    from mtp_viz.measure.records import LOCAL_LABELS
    rec = _rec("speculative", "constant-2", 0, 1.0)
    assert rec.as_dict(LOCAL_LABELS)["mode"] == "ours" and rec.as_dict()["mode"] == "speculative"
    assert "ids" not in rec.as_dict() and "parity" not in rec.as_dict()   # unset fields left out


def test_parity_check_reports_mismatches():
    def ran(mode, ids):
        return Record(mode, 1.0, 3, 3, ids=ids)
    done = {("autoregressive", ""): ran("autoregressive", (1, 2, 3)),
            ("reference", "constant-2"): ran("reference", (1, 2, 3)),
            ("speculative", "constant-2"): ran("speculative", (1, 2, 3)),
            ("reference", "constant-4"): ran("reference", (1, 2, 3)),
            ("speculative", "constant-4"): ran("speculative", (1, 9, 3)),
            ("speculative", "optimal-4"): ran("speculative", (1, 2, 3))}
    checked, failures, lines = check_parity(done, where="on p (repeat 0)")
    assert failures == 1
    assert checked[("speculative", "constant-2")].parity is True
    assert checked[("speculative", "constant-4")].parity is False
    assert checked[("speculative", "constant-4")].first_difference == 1
    assert checked[("speculative", "optimal-4")].parity is None
    assert done[("speculative", "constant-4")].parity is None   # records are values: the check made new ones
    assert lines == ["MISMATCH constant-4 on p (repeat 0): ours differs from transformers at new token 1: "
                     "[9, 3] vs [2, 3]"]


def test_metrics_agree_with_engine_totals():
    """A drafter we control (the target's own greedy text, every 3rd draft corrupted)
    exercises acceptance; the metric functions must agree with the engine's totals."""
    target = gemma_target(sharpen=4.0)
    prompt = [2, 5, 9, 14, 20]
    script = greedy_reference(target, prompt, 40)
    drafter = ScriptDrafter(len(prompt), script, wrong_every=3)
    drafter.kind = "lookup"  # a drafter without a model of its own, as run_mode reads its entry
    pair = SimpleNamespace(  # what the local source reads of a pair, around a prompt given as ids
        target=target, decoder=target, drafter_model=None, eos_token_ids=(), tokenizer=None, context_length=0,
        device="cpu",
        precision={"target": "float32", "drafter": None}, encode=lambda text, chat: list(prompt),
        make_drafter=lambda kind: drafter)
    runner = Runner(pair, RunSettings("", drafter="lookup", max_new_tokens=40, sampling=Sampling(), chat=False))
    try:
        rec, ev = runner.run("speculative", "the prompt's ids", Setting("constant", 4))
    finally:
        runner.close()
    assert list(rec.ids) == script
    done, s = ev[-1], metrics.summarize(ev)
    # timed as the app's Run is: the engine's own seconds, on the engine thread's CPU clock (1 thread)
    assert rec.seconds == done.seconds > 0 and rec.clock == "cpu" == ev[0].settings["clock"]
    assert 0 < s.acceptance_rate < 1 and s.rejections > 0
    assert (s.drafted, s.accepted) == (done.drafted, done.accepted)
    assert s.tau == pytest.approx(done.tau)
    assert s.target_forwards == rec.target_forwards == runner.forwards
    # every corrupted step rejects exactly once; all others accept everything drafted
    assert s.alpha == pytest.approx(s.accepted / (s.accepted + s.rejections))


@pytest.fixture(scope="module")
def saved_pair(tmp_path_factory):
    pytest.importorskip("mtp_viz.sources.models")
    root = tmp_path_factory.mktemp("pair")
    target, drafter, tok = gemma_target(), gemma_assistant(k=2), word_tokenizer()
    target.save_pretrained(root / "target")
    tok.save_pretrained(root / "target")
    drafter.save_pretrained(root / "drafter")
    tok.save_pretrained(root / "drafter")
    return root


@pytest.mark.parametrize("argv, message", [
    (["--dtype", "fp8"], "Unknown dtype 'fp8'; use float32, bfloat16, float16, int8 or int4."),
    (["--precisions", "float32/float32,int4/float32"], "int4 has no kernel on this CPU (torchao "),
    (["--precisions", "float32/float32,float32"], "A precision pair is target/drafter, like float32/int8, "
     "not 'float32'."),
    (["--precisions", "int8/int8,INT8/int8"], "--precisions lists a pair twice."),
    (["--precisions", "float32/float32", "--dtype", "int8"], "--precisions names each pair's precisions; leave "
     "out --dtype, --target-precision and --drafter-precision."),
    (["--target-precision", "fp4"], "Unknown target precision 'fp4'"),
])
def test_bench_precisions_are_checked_before_anything_loads(saved_pair, argv, message, capsys):
    from mtp_viz.cli.main import main
    assert main(["bench", "--target", str(saved_pair / "target"), "--drafter", str(saved_pair / "drafter"),
                 "--quick", "--no-progress", *argv]) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1


@pytest.mark.slow
def test_bench_quick_end_to_end(saved_pair, tmp_path, capsys):
    from mtp_viz.cli.main import main
    out = tmp_path / "out"
    threads = torch.get_num_threads()
    code = main(["bench", "--target", str(saved_pair / "target"), "--drafter",
                 str(saved_pair / "drafter"), "--quick", "--no-chat", "--no-progress",
                 "--categories", "code,chat", "--max-new-tokens", "12",
                 "--schedules", "constant,optimal", "--threads", "1", "--out", str(out)])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    assert torch.get_num_threads() == threads
    result = json.loads((out / "bench.json").read_text())
    names = [r["setting"] for r in result["settings"]]
    assert names == ["constant-2", "constant-4", "optimal-4"]
    for row in result["settings"]:
        if row["schedule"] == "constant":
            assert row["parity"] is True
            assert row["overhead_vs_reference"] > 0
        assert row["speedup"] > 0 and row["decode_speedup"] > 0 and row["predicted_speedup"] > 0
        assert row["measured_over_predicted"] > 0
    assert result["meta"]["parity_failures"] == 0
    assert {c["category"] for c in result["categories"]} == {"code", "chat"}
    modes = {r["mode"] for r in result["runs"]}
    assert modes == {"autoregressive", "reference", "ours"}
    page = (out / "bench.html").read_text()
    assert "Plotly.newPlot" in page and 'src="https://cdn' not in page
    md = (out / "bench.md").read_text()
    assert "constant-4" in md
    # one repeat makes no call; the terminal's table is compact, bench.md has every column
    assert {r["verdict"] for r in result["settings"]} == {"no call (one repeat)"}
    header = next(line for line in captured.out.splitlines() if line.startswith("| setting |"))
    assert header.count("|") - 1 == 11 and "| overhead vs ref |" not in header
    assert "| overhead vs ref |" in md and "columns: bench.md and --wide have every one" in captured.out
    if result["verify_slope"] is not None:
        assert "One verification costs v = " in md and "Verification cost grows by" not in md
    # where it ran: the machine line in bench.json's meta and bench.md's header (measure.machine)
    meta = result["meta"]
    assert meta["host"]["cores"] == os.cpu_count() and meta["host"]["torch_threads"] == 1
    assert meta["host"]["cpu"] and meta["host"]["torch"] == torch.__version__
    assert meta["machine_line"].startswith(meta["host"]["cpu"]) and "1 torch thread" in meta["machine_line"]
    assert f"Machine: {meta['machine_line']}." in (out / "bench.md").read_text()


@pytest.mark.slow
def test_stale_kv_experiment_reproduces_transformers(saved_pair, tmp_path):
    """The experiment's 'transformers' variant must hand the drafter exactly what
    transformers does: same drafts, hence the same number of target forwards."""
    import importlib.util
    path = ROOT / "benchmarks" / "stale_kv.py"
    spec = importlib.util.spec_from_file_location("stale_kv", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    prompts = tmp_path / "prompts.json"
    prompts.write_text(json.dumps({"prompts": [
        {"id": "a", "category": "x", "text": " ".join(f"w{i}" for i in range(5, 45))},
        {"id": "b", "category": "y", "text": " ".join(f"w{i}" for i in range(300, 330))}]}))
    threads = torch.get_num_threads()
    try:
        assert mod.main(["--target", str(saved_pair / "target"), "--drafter", str(saved_pair / "drafter"),
                         "--prompts", str(prompts), "--draft-tokens", "2,3", "--max-new-tokens", "16",
                         "--no-chat", "--out", str(tmp_path / "res")]) == 0
    finally:
        torch.set_num_threads(threads)
    result = json.loads((tmp_path / "res" / "stale_kv.json").read_text())
    for row in result["rows"]:
        assert row["same_tokens"]
        assert row["transformers_variant_matches_reference_forwards"] == "2/2"
    assert "Δτ" in (tmp_path / "res" / "stale_kv.md").read_text()


@pytest.mark.slow
def test_bench_runs_every_precision_pair_in_one_run(saved_pair, tmp_path, capsys):
    """One row per pair, named by its precisions, its speedup over its own target's plain
    decoding, and drift: its target's plain greedy text against the float32 target's."""
    from mtp_viz.cli.main import main
    from mtp_viz.engine.loop import autoregressive
    from mtp_viz.sources.models import load_pair
    out = tmp_path / "out"
    code = main(["bench", "--target", str(saved_pair / "target"), "--drafter", str(saved_pair / "drafter"),
                 "--quick", "--no-chat", "--no-progress", "--categories", "code,chat", "--max-new-tokens", "12",
                 "--draft-tokens", "2", "--schedules", "constant", "--threads", "1", "--out", str(out),
                 "--precisions", "float32/float32,bfloat16/float32,int8/int8"])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    result = json.loads((out / "bench.json").read_text())
    assert result["meta"]["precisions"] == ["float32/float32", "bfloat16/float32", "int8/int8"]
    rows = {r["precision"]: r for r in result["settings"]}
    assert [r["setting"] for r in result["settings"]] == [
        "constant-2 float32/float32", "constant-2 bfloat16/float32", "constant-2 int8/int8"]
    assert [(r["target_precision"], r["drafter_precision"]) for r in result["settings"]] == [
        ("float32", "float32"), ("bfloat16", "float32"), ("int8", "int8")]
    assert rows["float32/float32"]["parity"] is True and rows["int8/int8"]["parity"] is True  # float32 arithmetic
    assert rows["bfloat16/float32"]["parity"] is None  # transformers does not run two dtypes: no reference
    for r in result["settings"]:
        assert r["speedup"] > 0 and 0 <= r["acceptance_rate"] <= 1 and r["tau"] > 0
        assert r["autoregressive_tokens_per_second"] == \
            result["autoregressive_by_precision"][r["target_precision"]]["tokens_per_second"]
    assert {(r["mode"], r.get("target_precision"), r.get("drafter_precision")) for r in result["runs"]} == {
        ("autoregressive", "float32", None), ("autoregressive", "bfloat16", None), ("autoregressive", "int8", None),
        ("ours", "float32", "float32"), ("ours", "bfloat16", "float32"), ("ours", "int8", "int8"),
        ("reference", "float32", "float32"), ("reference", "int8", "int8")}
    # drift, recomputed here from each target's own plain greedy runs
    prompts = load_prompts(None, categories="code,chat", per_category=1)
    plain = {}
    for t in ("float32", "bfloat16", "int8"):
        pair = load_pair(str(saved_pair / "target"), str(saved_pair / "drafter"), target_precision=t)
        plain[t] = [list(list(autoregressive(pair.target, pair.encode(p.text, chat=False), max_new_tokens=12,
                                            eos_token_ids=pair.eos_token_ids))[-1].generated_ids) for p in prompts]
    for t, r in (("float32", "float32/float32"), ("bfloat16", "bfloat16/float32"), ("int8", "int8/int8")):
        assert rows[r]["drift"] == pytest.approx(metrics.drift(plain[t], plain["float32"]))
    assert rows["float32/float32"]["drift"] == 0
    md = (out / "bench.md").read_text()
    assert "### By precision (target/drafter)" in md and "| bfloat16/float32 | constant-2 |" in md
