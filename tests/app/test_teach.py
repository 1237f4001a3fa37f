"""The teaching features' pure parts: the what-if estimate (against the theory module),
deep-link parsing and building, and the teaching views."""
from __future__ import annotations

import json
import re
from urllib.parse import parse_qsl, urlsplit

import pytest

from mtp_viz.analysis import metrics
from mtp_viz.analysis.metrics import TheoryCheck
from mtp_viz.analysis.whatif import what_if
from mtp_viz.app.handlers import links
from mtp_viz.app.page import teach
from mtp_viz.engine import theory
from mtp_viz.prompts import category_suite
from mtp_viz.views import explain as teach_view
from streams import PLAN, ar_run, spec_stream


def check(alphas, c, v=None, draft_tokens=4.0):
    """A TheoryCheck carrying only what the what-if reads (the rest is not used)."""
    return TheoryCheck(acceptance_rate=0.0, alpha=0.0, draft_tokens=draft_tokens, tau=2.0, tau_predicted=0.0, c=c,
                       speedup_predicted=0.0, optimal_draft_tokens=1, speedup_star=0.0, v=v,
                       per_position_conditional=tuple(alphas))


# ---------------------------------------------------------------- what-if


def test_what_if_by_hand():
    w = what_if(check([0.8, 0.5], c=0.1), cap=3)
    # τ(1) = 1 + .8; τ(2) = 1 + .8 + .8·.5; speedup = τ / (1 + γc)
    assert [r.tau for r in w.rows] == pytest.approx([1.8, 2.2, 2.4])
    assert [r.speedup for r in w.rows] == pytest.approx([1.8 / 1.1, 2.2 / 1.2, 2.4 / 1.3])
    assert [r.extrapolated for r in w.rows] == [False, False, True]
    # γ = 3 looks better still, but only by reusing position 2's acceptance: the best the
    # run's own data supports is 2
    assert w.best == 2 and w.best_row.speedup == pytest.approx(2.2 / 1.2)


def test_what_if_equals_theory_for_a_constant_alpha():
    a, c, cap = 0.7, 0.05, 10
    w = what_if(check([a] * cap, c), cap=cap)
    for r in w.rows:
        assert r.tau == pytest.approx(theory.expected_tokens(a, r.draft_tokens))
        assert r.speedup == pytest.approx(theory.predicted_speedup(a, r.draft_tokens, c))
    assert (w.best, w.best_row.speedup) == pytest.approx(theory.optimal_draft_tokens(a, c, cap))


def test_what_if_of_a_recorded_run_uses_its_measured_acceptance_and_costs():
    spec = spec_stream([(4, a, dict(draft_s=0.04, verify_s=0.15)) for _, a in PLAN])
    base = ar_run([""] * 10, dt=0.1)
    tc = metrics.theory_check(spec, base)
    w = what_if(tc, cap=8)
    alphas = metrics.per_position_acceptance(spec, conditional=True)
    assert list(w.alphas) == pytest.approx(alphas)
    assert tc.v == pytest.approx(1.5) and tc.c == pytest.approx(0.1)
    slope = (tc.v - 1) / tc.draft_tokens            # v(γ) = 1 + sγ through the measured v(4)
    assert w.slope == pytest.approx(slope)
    padded = alphas + [alphas[-1]] * 4
    for r in w.rows:
        assert r.tau == pytest.approx(theory.expected_tokens_positional(padded[:r.draft_tokens]))
        assert r.speedup == pytest.approx(theory.predicted_speedup_positional(padded[:r.draft_tokens], tc.c + slope))
        assert r.extrapolated == (r.draft_tokens > 4)
    # at the run's own draft length, cost 1 + γ(c + s) = γc + v: the theory panel's denominator
    assert w.rows[3].speedup == pytest.approx(w.rows[3].tau / (4 * tc.c + tc.v))
    measured = [r for r in w.rows if not r.extrapolated]
    assert w.best == max(measured, key=lambda r: r.speedup).draft_tokens
    assert w.run_speedup == tc.speedup_measured


def test_what_if_needs_judged_drafts():
    assert what_if(None) is None
    assert what_if(check([], 0.1)) is None
    assert what_if(check([None, None], 0.1)) is None
    assert what_if(check([0.9, None, 0.5], 0.1)).alphas == (0.9,)


def test_what_if_view_marks_the_best_and_says_estimate():
    w = what_if(check([0.8, 0.5], c=0.1), cap=3)
    page = teach_view.what_if_html(w)
    assert "estimate" in page
    assert re.findall(r'data-gamma="(\d+)"[^>]*data-best', page) == ["2"]
    assert page.count("(extrapolated)") == 1
    assert "Appears after" in teach_view.what_if_html(None)


# ---------------------------------------------------------------- deep links

LIMITS = links.Limits(models=("tiny", "e2b"), max_new_tokens=128, prompt_chars=200)


def test_a_link_sets_exactly_its_settings():
    link = links.parse({"prompt": "def f(x):\n  return <x>", "model": "tiny", "draft_tokens": "6",
                        "max_new_tokens": "32", "decoding": "greedy", "schedule": "heuristic",
                        "drafter": "lookup", "presenter": "1", "__theme": "dark"}, LIMITS)
    assert link.values == {"prompt": "def f(x):\n  return <x>", "model": "tiny", "draft_tokens": 6,
                           "max_new_tokens": 32, "decoding": "greedy", "schedule": "heuristic",
                           "drafter_kind": "lookup"}
    assert link.problems == [] and link.sentence() == ""


@pytest.mark.parametrize("key,value", [
    ("draft_tokens", "0"), ("draft_tokens", "17"), ("draft_tokens", "2.5"), ("draft_tokens", "six"),
    ("max_new_tokens", "129"), ("max_new_tokens", "nan"), ("model", "gpt-9"), ("decoding", "beam"),
    ("temperature", "0"), ("temperature", "inf"), ("top_p", "1.5"), ("top_k", "-1"), ("seed", "1e400"),
    ("schedule", "random"), ("drafter", "oracle"), ("prompt", "   "), ("prompt", "x" * 201),
])
def test_a_bad_parameter_is_ignored_with_one_phrase(key, value):
    link = links.parse({key: value, "draft_tokens" if key != "draft_tokens" else "seed": "3"}, LIMITS)
    assert len(link.problems) == 1 and link.problems[0].startswith(key + " (must be")
    assert set(link.values) == {"draft_tokens" if key != "draft_tokens" else "seed"}
    sentence = link.sentence()
    assert sentence.startswith("Ignored from the link:") and sentence.count(".") == 1 + sentence.count("0.05")


def test_unknown_parameters_are_named_but_not_echoed_at_length():
    link = links.parse({"draft_token": "6", "z" * 100: "1"}, LIMITS)
    assert link.values == {} and link.problems[0] == "draft_token (not a setting)"
    assert link.problems[1] == "z" * 23 + "… (not a setting)"


def test_a_tab_is_the_page_s_not_a_setting_and_a_bad_one_is_named():
    limits = links.Limits(("tiny",), 64, 200, tabs=("decode", "measure"))
    assert links.parse({"tab": "measure", "draft_tokens": "3"}, limits).problems == []   # the page's script opens it
    assert links.parse({"tab": "measure"}, limits).values == {}
    for bad in ("Measure", "servers", ""):
        assert links.parse({"tab": bad}, limits).problems == ["tab (must be one of decode, measure)"], bad


def test_the_built_link_parses_back_to_the_same_settings():
    values = {"prompt": "Résumé & <b>JSON</b>?\n", "model": "e2b", "draft_tokens": 5.0, "max_new_tokens": 64,
              "decoding": "sampling", "temperature": 0.8, "top_p": 0.95, "top_k": 40, "seed": 7,
              "schedule": "constant", "drafter_kind": "mtp", "chat": True, "custom_target": "x"}
    q = links.query(values, LIMITS)
    back = links.parse(dict(parse_qsl(urlsplit(q).query)), LIMITS)
    assert back.problems == []
    assert back.values == {k: v for k, v in values.items() if k not in ("chat", "custom_target")}


def test_a_greedy_link_leaves_out_sampling_and_invalid_values():
    q = links.query({"prompt": "hi", "model": "custom", "draft_tokens": 99, "decoding": "greedy",
                     "temperature": 0.8, "seed": 3, "max_new_tokens": 16}, LIMITS)
    assert dict(parse_qsl(q[1:])) == {"prompt": "hi", "decoding": "greedy", "max_new_tokens": "16"}


# ---------------------------------------------------------------- views


def test_every_explanation_is_two_sentences():
    for key, (title, text) in teach_view.EXPLAIN.items():
        assert len(re.findall(r"[.!?](?=\s|$)", text)) == 2, key
        assert f'data-explain="{key}"' in teach_view.explain(key)


def test_the_glossary_defines_every_term():
    page = teach_view.glossary_html()
    terms = re.findall(r'<dt data-term="([^"]+)">', page)
    assert terms == ["draft", "verify", "acceptance-rate", "alpha", "tau", "bonus-token", "correction",
                     "gamma", "cost-coefficient", "mtp", "shared-kv-cache", "clustered-head",
                     "eager-engine", "compiled-engine", "engine-cpu-time"]
    assert page.count("<dd>") == len(terms)
    # every term the speedup badge and the stats panes use is defined (issue 42, point 3)
    from mtp_viz.engine.events import Ran
    from mtp_viz.views import stats
    badge = stats.engine_label(Ran().label) + stats.measured_over(2.0, 1.0, "cpu", 1, "one run each")
    for words in ("eager engine", "engine CPU time"):
        assert words in badge and f"<dt data-term=\"{words.replace(' ', '-').lower()}\">" in page, words
    assert '<dt data-term="compiled-engine">' in page


def test_when_mtp_helps_lists_the_categories_and_only_measured_numbers():
    suite = json.loads(category_suite().read_text(encoding="utf-8"))
    results = teach.measured_results()
    assert results, "the repository's benchmark results are missing"
    page = teach.when_helps()
    for c in suite["categories"]:
        assert f'data-category="{c}"' in page
    for source, _, bench in results:
        assert (teach.RESULTS.parent.parent / source).exists() and f'data-source="{source}"' in page
        setting = teach_view.bench_setting(bench)
        for cat in bench["categories"]:
            assert teach_view._cell(cat[setting]) in page
    assert "26B-A4B" in page and "batch size 1" in page
    hostile = teach_view.when_helps_html(["code"], {"code": ["<script>"]}, [("a<b", "<img>", {})], "<i>")
    assert "<script>" not in hostile and "<img>" not in hostile and "<i>" not in hostile


def test_when_mtp_helps_without_results_shows_no_numbers(tmp_path):
    assert teach.measured_results(tmp_path) == []
    page = teach_view.when_helps_html(["code"], {}, [], "note")
    assert "×" not in page and "No benchmark results" in page
