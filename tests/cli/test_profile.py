"""`mtp-viz profile` on a random pair of the bundled shape: it writes profile.json and
profile.md, every figure it reports is recomputed here from the timings it reports, the
runs at set acceptance are lossless, and a bad flag is one sentence with exit status 2.
``--precisions``: each precision's plain step side by side, one pair resident at a time, a
precision this CPU cannot run a row saying why."""
import json
import statistics
import weakref

import pytest

from mtp_viz.analysis import payoff, published
from mtp_viz.cli.main import main
from mtp_viz.engine import theory
from mtp_viz.views import profile as view


@pytest.fixture(scope="module")
def result(tmp_path_factory):
    out = tmp_path_factory.mktemp("profile")
    code = main(["profile", "--target", "tiny", "--weights", "random", "--repeats", "2", "--max-draft-tokens", "3",
                 "--draft-tokens", "2", "--max-new-tokens", "12", "--prompt-tokens", "10", "--alphas", "0.5,0.9",
                 "--out", str(out)])
    assert code == 0
    return json.loads((out / "profile.json").read_text()), (out / "profile.md").read_text()


def test_every_cost_is_the_median_of_the_timings_it_reports(result):
    r, _ = result
    c = r["engines"]["eager"]["costs"]
    s = c["samples"]
    assert c["plain"] == statistics.median(s["plain"]) and len(s["plain"]) == 2
    assert c["draft"] == statistics.median(s["draft"])
    assert c["prefill_per_token"] == statistics.median(s["prefill"])
    assert sorted(c["verify"]) == ["1", "2", "3", "4"]
    for w, v in c["verify"].items():
        assert v == statistics.median(s[f"verify{w}"])


def test_the_predictions_follow_from_the_costs(result):
    r, _ = result
    e = r["engines"]["eager"]
    c, pred = e["costs"], e["prediction"]
    plain = r["fastest_plain"]["step_seconds"]
    assert plain == c["plain"]
    for g, row in pred["speedup"].items():
        g = int(g)
        for a, s in zip(pred["alphas"], row):
            tokens = sum(a ** k for k in range(g + 1))
            assert s == pytest.approx(tokens * plain / (g * c["draft"] + c["verify"][str(g + 1)]))
        be = pred["break_even"][str(g)]
        if be is not None:
            tokens = theory.expected_tokens(be, g)
            assert tokens * plain / (g * c["draft"] + c["verify"][str(g + 1)]) == pytest.approx(1.0, abs=1e-3)
    prompt, n = r["meta"]["prompt_tokens"], r["meta"]["new_tokens"]
    for run in e["runs"]:
        tokens = theory.expected_tokens(run["alpha"], 2)
        step = 2 * c["draft"] + c["verify"]["3"]
        want = ((prompt * c["prefill_per_token"] + (n - 1) * plain)
                / (prompt * c["prefill_per_token"] + (n - 1) / tokens * step))
        assert run["predicted"] == pytest.approx(want)
        assert run["speedup"] == pytest.approx(run["tokens_per_second"] / r["fastest_plain"]["run_tokens_per_second"])
        assert run["same_tokens"] and run["label"] == f"acceptance set to {run['alpha']:g}; every forward real"


def test_the_table_says_what_the_pair_is_and_where_it_ran(result):
    r, md = result
    assert r["meta"]["weights"] == "random" and "random weights: timings only" in md
    assert r["meta"]["machine_line"] in md and r["meta"]["host"]["cores"] >= 1
    assert "acceptance set to 0.9; every forward real" in md
    assert "not measured: its weights are random" in md and r["own_acceptance"] is None


def test_the_published_acceptances_are_predicted_with_their_sources(result):
    r, md = result
    e = r["engines"]["eager"]
    c, plain = e["costs"], r["fastest_plain"]["step_seconds"]
    verify = {int(w): s for w, s in c["verify"].items()}                 # widths 1..4: γ up to 3 timed
    figures = {f.id: f for f in published.load()}
    assert [row["id"] for row in e["published"]] == list(figures)        # every figure, in the table's order
    for row in e["published"]:
        src = row["source"]
        assert src["link"].startswith("https://") and src["where"] and src["says"]
        assert row["doc"].startswith("docs/published-acceptance.md#") and row["task"] and row["engine"]
        # the tiny pair is no Gemma 4 size: every row is another size's, and says which
        assert not row["same_model"] and f"published for {row['model_size']} on {row['task']}" in row["label"]
        assert row["alpha"] == pytest.approx(published.alpha(figures[row["id"]]))
        assert row["speedup_at_profile_draft_tokens"] == pytest.approx(
            payoff.speedup(row["alpha"], 2, plain, verify, c["draft"]))
        own = row["speedup_at_own_draft_tokens"]
        if row["draft_tokens"] <= 3:
            assert own == pytest.approx(payoff.speedup(row["alpha"], row["draft_tokens"], plain, verify, c["draft"]))
        else:
            assert own is None
        assert row["label"] in md and src["where"] in md
    assert r["published"]["model_size"] is None and r["published"]["conversion"] == published.CONVERSION
    assert "## Predicted speedup at published acceptances: eager engine" in md and "no Gemma 4 size" in md
    assert "Google published no acceptance rates" in md and "#47920" in md
    assert {"costs", "prediction", "runs", "plain_run"} <= set(e)          # the keys others read, unchanged
    page = view.html(r)                       # the app's #profile-result: the same blocks, escaped
    assert "Predicted speedup at published acceptances: eager engine" in page
    assert "published for E4B on MT-Bench (vLLM, γ=2)" in page and "OpenWhispr/openwhispr#1269" in page


def test_a_real_pair_reports_its_own_acceptance(tmp_path):
    assert main(["profile", "--target", "tiny", "--repeats", "1", "--max-draft-tokens", "2", "--draft-tokens", "2",
                 "--max-new-tokens", "8", "--prompt-tokens", "8", "--alphas", "", "--out", str(tmp_path)]) == 0
    r = json.loads((tmp_path / "profile.json").read_text())
    own = r["own_acceptance"]
    assert own["drafted"] > 0 and own["alpha"] == theory.alpha_mle(own["accepted"], own["rejections"])


@pytest.mark.parametrize("flags, says", [
    (["--alphas", "0.5,2"], "--alphas must be"), (["--threads", "99"], "--threads must be"),
    (["--draft-tokens", "9", "--max-draft-tokens", "8"], "--draft-tokens must be"),
    (["--weights", "random", "--dtype", "int4"], "int4 has no kernel on this CPU"),   # torchao 0.18: CUDA only
    (["--precisions", "float32,int3"], "--precisions must list precisions"),
    (["--precisions", "bf16,bfloat16"], "--precisions lists bfloat16 twice"),
])
def test_a_bad_flag_is_one_sentence(flags, says, tmp_path, capsys):
    assert main(["profile", "--out", str(tmp_path / "x"), *flags]) == 2
    err = capsys.readouterr().err.strip()
    assert says in err and len(err.splitlines()) == 1


@pytest.fixture(scope="module")
def by_precision(tmp_path_factory):
    out = tmp_path_factory.mktemp("precisions")
    code = main(["profile", "--target", "tiny", "--device", "cpu", "--precisions", "float32,bf16,int8,int4",
                 "--repeats", "1", "--max-draft-tokens", "2", "--draft-tokens", "2", "--max-new-tokens", "4",
                 "--prompt-tokens", "8", "--alphas", "", "--out", str(out)])
    assert code == 0
    return json.loads((out / "profile.json").read_text()), (out / "profile.md").read_text()


def test_each_precision_has_its_plain_step_beside_the_others(by_precision):
    r, md = by_precision
    s = r["precisions"]
    rows = {row["precision"]: row for row in s["rows"]}
    assert list(rows) == ["float32", "bfloat16", "int8", "int4"]
    assert [x["engine"] for x in s["rows"]] == ["eager", "eager", "eager", None]   # int4 never loaded
    for name in ("float32", "bfloat16", "int8"):
        row = rows[name]
        assert row["refused"] is None and row["plain_seconds"] > 0 and row["verify_width"] == 3
        assert row["plain_seconds"] == statistics.median(row["samples"]["plain"])
        assert row["tokens_per_second"] == pytest.approx(1 / row["plain_seconds"])
        assert row["verify_seconds"] > 0 and row["prefill_per_token_seconds"] > 0 and row["draft_seconds"] > 0
        assert row["weight_gb_per_second"] == pytest.approx(row["step_weight_bytes"] / row["plain_seconds"] / 1e9)
        assert f"| {name} | eager | {row['plain_seconds'] * 1e3:.2f} |" in md
    # bfloat16 stores every weight in half float32's bytes; int8 a byte a linear weight
    assert rows["float32"]["step_weight_bytes"] == 2 * rows["bfloat16"]["step_weight_bytes"]
    assert rows["int8"]["step_weight_bytes"] < rows["float32"]["step_weight_bytes"]
    timed = [x for x in s["rows"] if x["plain_seconds"] is not None]
    top = min(timed, key=lambda x: x["plain_seconds"])
    assert [x["precision"] for x in timed if x["fastest"]] == [top["precision"]]
    assert s["fastest_measured"]["precision"] == top["precision"] and "fastest measured" in md
    assert "## Plain step by precision" in md and s["fastest"]["why"] in md


def test_a_precision_this_cpu_cannot_run_is_a_row_saying_why(by_precision):
    r, md = by_precision
    int4 = next(x for x in r["precisions"]["rows"] if x["precision"] == "int4")   # torchao 0.18: CUDA only
    assert int4["plain_seconds"] is None and not int4["fastest"] and int4["engine"] is None
    assert "int4 has no kernel on this CPU" in int4["refused"] and "\n" not in int4["refused"]
    assert int4["refused"] in md


def test_a_bad_precisions_list_is_refused_before_anything_loads(tmp_path, capsys):
    # the target does not exist: had it been looked at first, that would be the sentence
    assert main(["profile", "--target", str(tmp_path / "missing"), "--precisions", "float32,int3",
                 "--out", str(tmp_path / "x")]) == 2
    err = capsys.readouterr().err.strip()
    assert "--precisions must list precisions" in err
    assert len(err.splitlines()) == 1 and not (tmp_path / "x").exists()


def test_one_pair_is_resident_at_a_time():
    from mtp_viz.measure.precisions import sweep
    from mtp_viz.sources.models import load_pair
    held = []

    def load(name):
        assert all(ref() is None for ref in held), "the last precision's target was still held"
        pair = load_pair("tiny", device="cpu", dtype=name)
        held.append(weakref.ref(pair.target))
        return pair
    s = sweep(["float32", "bfloat16"], load, "cpu", prompt_tokens=8, draft_tokens=1, repeats=1)
    assert [x["precision"] for x in s["rows"]] == ["float32", "bfloat16"]
    assert len(held) == 2 and all(ref() is None for ref in held)


def test_the_page_opens_with_the_answer_and_its_chart_marks_the_published_acceptance(result):
    """One sentence per engine first (MTP's predicted speedup at the chat figure, labelled with
    the size it was published for, and the break-even), and that figure's α marked on the chart."""
    from mtp_viz.analysis import published
    from mtp_viz.views.profile import figure, markdown
    result, md = result
    chat = next(f for f in published.load() if f.id == published.CHAT)
    lines = md.rstrip("\n").splitlines()
    # the JSON renders as the run did
    assert lines == markdown(json.loads(json.dumps(result))).rstrip("\n").splitlines()
    first = next(ln for ln in lines if ln.startswith("On this machine"))
    assert lines.index(first) < lines.index("## What each forward costs (ms)")
    row = next(r for r in result["engines"]["eager"]["published"] if r["id"] == published.CHAT)
    assert f"×{row['speedup_at_profile_draft_tokens']:.2f}" in first and "published for E4B" in first
    be = result["engines"]["eager"]["prediction"]["break_even"][str(result["meta"]["draft_tokens"])]
    assert first.endswith(f"break-even at α = {'never' if be is None else f'{be:.2f}'}.")
    marked = [s.x0 for s in figure(result).layout.shapes if s.line.dash == "dot"]
    assert published.alpha(chat) in marked
