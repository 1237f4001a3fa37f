"""The published acceptance table: every figure shipped has its source and its setting and a
section of docs/published-acceptance.md, converts to the α that gives it back under the
geometric model, and comes out of a profile's rows labelled with the size it was published
for; a malformed table is one sentence."""
import dataclasses
import json
import re
from pathlib import Path

import pytest

from mtp_viz.analysis import payoff, published
from mtp_viz.engine import theory
from mtp_viz.errors import UserError

ROOT = Path(__file__).resolve().parents[2]
VERIFY = {1: 1.0, 2: 1.02, 3: 1.05, 4: 1.08, 5: 1.12}   # widths 1..5: drafts up to 4 timed


def _raw() -> dict:
    return json.loads(published.table_path().read_text(encoding="utf-8"))


def test_every_shipped_figure_has_a_source_and_a_setting():
    raw = _raw()["figures"]
    assert len(raw) >= 6 and len(published.load()) == len(raw)
    for f in raw:
        src = f["source"]
        assert src["link"].startswith("https://") and src["where"].strip() and src["says"].strip(), f["id"]
        assert f["model"].startswith("google/gemma-4-") and f["assistant"] == f["model"] + "-assistant", f["id"]
        assert f["task"].strip() and f["engine"].strip() and f["as_published"].strip(), f["id"]
        assert isinstance(f["draft_tokens"], int) and f["draft_tokens"] >= 1, f["id"]
        assert f["kind"] in ("tau", "acceptance") and f["model_size"] in published.SIZES, f["id"]
        assert published.model_size(f["model"]) == f["model_size"], f["id"]   # the size its model id names
    ids = [f["id"] for f in raw]
    assert len(set(ids)) == len(ids)
    assert len({published.label(f) for f in published.load()}) == len(raw)   # no two rows read alike


def test_the_issue_figures_are_shipped_as_their_sources_give_them():
    by_id = {f.id: f for f in published.load()}
    vllm = [by_id[f"vllm-e4b-{t}"] for t in ("mt-bench", "humaneval", "gsm8k")]
    assert [(f.value, f.kind, f.draft_tokens, f.model_size) for f in vllm] == [
        (2.28, "tau", 2, "E4B"), (2.68, "tau", 2, "E4B"), (2.67, "tau", 2, "E4B")]
    spark = by_id["llamacpp-31b-spark-explain"], by_id["llamacpp-31b-spark-code-cpp"]
    assert [(f.value, f.kind, f.draft_tokens, f.precision) for f in spark] == [
        (0.459, "acceptance", 4, "Q8_0"), (0.716, "acceptance", 4, "Q8_0")]
    cpu = by_id["openwhispr-e2b-qat-cpu"]
    assert (cpu.value, cpu.kind, cpu.draft_tokens, cpu.model_size) == (0.89, "acceptance", 3, "E2B")
    assert "#23398" in spark[0].source.where and "#1269" in cpu.source.where


def test_googles_absence_of_figures_is_a_note_not_a_figure():
    (note,) = published.notes()
    assert "47920" in note.source.where and "didn't publish" in note.source.says
    assert note.id not in {f.id for f in published.load()}


def _anchors(page: Path) -> set[str]:
    from markdown.extensions.toc import slugify
    text = re.sub(r"^```.*?^```", "", page.read_text(encoding="utf-8"), flags=re.S | re.M)
    return {slugify(re.sub(r"[`*_]", "", t), "-") for t in re.findall(r"^#{1,6} +(.+?) *#*$", text, flags=re.M)}


def test_every_figure_and_note_points_at_its_section_of_the_docs_page():
    page = ROOT / published.DOC
    anchors = _anchors(page)
    text = page.read_text(encoding="utf-8")
    for entry in [*published.load(), *published.notes()]:
        path, _, anchor = entry.doc.partition("#")
        assert path == published.DOC and anchor in anchors, entry.id
        assert entry.source.link in text, entry.id      # the page cites what the table cites
    for f in published.load():
        assert f.as_published in text or f"{f.value:g}" in text, f.id
        assert f"| {published.alpha(f):.3f} |" in text, f.id           # the page's α is the code's


@pytest.mark.parametrize("g", [1, 2, 3, 4, 8])
@pytest.mark.parametrize("a", [0.1, 0.5, 0.737, 0.95])
def test_a_figure_converts_to_the_alpha_that_gives_it_back(a, g):
    base = published.load()[0]
    tau = dataclasses.replace(base, kind="tau", draft_tokens=g, value=theory.expected_tokens(a, g))
    rate = dataclasses.replace(base, kind="acceptance", draft_tokens=g,
                               value=(theory.expected_tokens(a, g) - 1) / g)
    assert published.alpha(tau) == pytest.approx(a, abs=1e-6)       # α → τ → α
    assert published.alpha(rate) == pytest.approx(a, abs=1e-6)      # α → accepted ÷ drafted → α


def test_every_shipped_figure_is_reproduced_by_its_alpha():
    for f in published.load():
        a, g = published.alpha(f), f.draft_tokens
        back = theory.expected_tokens(a, g) if f.kind == "tau" else (theory.expected_tokens(a, g) - 1) / g
        assert back == pytest.approx(f.value, abs=1e-6) and 0 < a < 1, f.id
        assert f"γ = {g}" in published.conversion(f)


def test_a_row_for_another_size_says_its_size_and_is_not_the_pairs_own():
    figures = published.load()
    got = published.rows(1.0, VERIFY, 0.05, 4, "E2B", figures)
    assert len(got) == len(figures) and got[0].same_model                 # the pair's own size first
    for r in got:
        f = r.figure
        assert f"published for {f.model_size} on {f.task}" in r.label and f"γ={f.draft_tokens}" in r.label
        assert r.same_model == (f.model_size == "E2B")
        assert r.speedup_at_profile_draft_tokens == pytest.approx(payoff.speedup(r.alpha, 4, 1.0, VERIFY, 0.05))
        assert r.speedup_at_own_draft_tokens == pytest.approx(
            payoff.speedup(r.alpha, f.draft_tokens, 1.0, VERIFY, 0.05))
        d = r.as_dict()
        assert d["source"]["link"] == f.source.link and d["doc"] == f.doc and d["label"] == r.label
    e4b = next(r for r in got if r.figure.id == "vllm-e4b-mt-bench")
    assert e4b.label == "at the acceptance published for E4B on MT-Bench (vLLM, γ=2)" and not e4b.same_model
    assert not any(r.same_model for r in published.rows(1.0, VERIFY, 0.05, 4, None, figures))   # tiny: none


def test_a_figure_whose_width_was_not_timed_has_no_speedup_at_its_own_draft_length():
    narrow = {1: 1.0, 2: 1.02, 3: 1.05}   # a compiled profile of γ = 2: widths 1..3
    for r in published.rows(1.0, narrow, 0.05, 2, "31B"):
        own = r.speedup_at_own_draft_tokens
        assert (own is None) == (r.figure.draft_tokens > 2), r.figure.id
        assert r.speedup_at_profile_draft_tokens > 0


@pytest.mark.parametrize("name, size", [("e4b", "E4B"), ("26B-A4B", "26B-A4B"), ("google/gemma-4-E2B-it", "E2B"),
                                        ("/models/gemma-4-31B-it", "31B"), ("google/gemma-4-12B-it-assistant", "12B"),
                                        ("tiny", None), ("gemma-4-E4Bx", None), ("Qwen/Qwen3-8B", None)])
def test_the_size_of_a_preset_or_a_model_name(name, size):
    assert published.model_size(name) == size


def _broken(tmp_path, change) -> Path:
    raw = _raw()
    change(raw["figures"][0])
    path = tmp_path / "secret-folder" / "table.json"
    path.parent.mkdir()
    path.write_text(json.dumps(raw), encoding="utf-8")
    return path


@pytest.mark.parametrize("change, says", [
    (lambda f: f.pop("source"), "figure 1 has no source with an https link"),
    (lambda f: f["source"].pop("where"), "figure 1 has no source with an https link"),
    (lambda f: f["source"].update(link="ftp://x"), "figure 1 has no source with an https link"),
    (lambda f: f.update(task=" "), "figure 1 has no task"),
    (lambda f: f.pop("model"), "figure 1 has no model"),
    (lambda f: f.update(draft_tokens=0), "figure 1 has no draft_tokens of at least 1"),
    (lambda f: f.update(kind="speedup"), "figure 1 has a kind that is none of tau, acceptance"),
    (lambda f: f.update(value=9.0), "figure 1 has a tau outside [1, 3]"),
    (lambda f: f.update(model_size="7B"), "figure 1 has a model_size that is none of"),
    (lambda f: f.update(sorce={}), "figure 1 has a field this table does not know"),
])
def test_a_malformed_table_is_one_sentence(tmp_path, change, says):
    path = _broken(tmp_path, change)
    with pytest.raises(UserError) as e:
        published.load(path)
    msg = str(e.value)
    assert says in msg and msg.startswith("The published acceptance table table.json")
    assert "\n" not in msg and "secret-folder" not in msg and "MT-Bench" not in msg   # no path, no contents


def test_a_table_that_is_no_json_is_one_sentence(tmp_path):
    path = tmp_path / "published.json"
    path.write_text("{not json", encoding="utf-8")
    with pytest.raises(UserError, match=r"^The published acceptance table published.json cannot be read as JSON\.$"):
        published.load(path)
