"""The views of counted experts, on real runs of a small mixture-of-experts pair (the
26B-A4B's classes) and of a dense one: the chart "Experts touched per verification" and
why it is empty, the anatomy panel's experts, and the theory panel and the what-if taking
the run's measured verification cost v."""
from __future__ import annotations

import dataclasses

import pytest

from factories import gemma_assistant, gemma_multimodal, gemma_target, word_tokenizer
from mtp_viz.analysis import experts
from mtp_viz.analysis.anatomy import anatomy
from mtp_viz.analysis.metrics import theory_check
from mtp_viz.analysis.whatif import what_if
from mtp_viz.engine import theory as formulas
from mtp_viz.engine.events import Start, Step
from mtp_viz.sources.local import LocalSource
from mtp_viz.sources.pair import ModelPair
from mtp_viz.sources.settings import RunSettings
from mtp_viz.views import charts, theory
from mtp_viz.views.anatomy import anatomy_html

PROMPT = " ".join(f"w{i}" for i in range(10, 40))


@pytest.fixture(scope="module")
def moe_pair():
    return ModelPair(gemma_multimodal(moe=True), gemma_assistant(), word_tokenizer(), "moe", None, "cpu")


@pytest.fixture(scope="module")
def dense_pair():
    return ModelPair(gemma_target(), gemma_assistant(), word_tokenizer(), "dense", None, "cpu")


def comparison(pair, **settings):
    runs = {"speculative": [], "autoregressive": []}
    s = RunSettings(PROMPT, chat=False, max_new_tokens=24, schedule="heuristic", **settings)
    for mode, e in LocalSource(pair).runs(s):
        runs[mode].append(e)
    return runs["speculative"], runs["autoregressive"]


@pytest.fixture(scope="module")
def counted(moe_pair):
    return comparison(moe_pair, experts=True)


def trace_named(fig, start: str):
    return next(t for t in fig.data if t.name.startswith(start))


def test_the_chart_plots_each_verification_against_its_draft_length(counted):
    spec, ar = counted
    fig = charts.experts_figure(spec, ar)
    steps = [e for e in spec if isinstance(e, Step)][1:]  # the prefill is no verification
    dots = trace_named(fig, "a verification")
    assert list(dots.x) == [s.draft_tokens for s in steps]
    assert list(dots.y) == pytest.approx([sum(s.experts_per_layer) / 4 for s in steps])
    assert len(set(dots.x)) >= 2  # the heuristic schedule verified several draft lengths
    plain = trace_named(fig, "one plain token")
    assert set(plain.y) == {2}  # top-2: what each of the baseline's own steps counted
    assert all(e.experts_per_layer == (2, 2, 2, 2) for e in ar if isinstance(e, Step) and e.step > 1)
    ceiling = trace_named(fig, "at most")
    assert list(ceiling.y) == [min(8, 2 * (g + 1)) for g in ceiling.x]
    assert all(y <= min(8, 2 * (x + 1)) for x, y in zip(dots.x, dots.y))
    means = trace_named(fig, "mean")
    assert dict(zip(means.x, means.y)) == pytest.approx(experts.mean_by_draft_length(experts.expert_steps(spec)))
    assert charts.all_figures(spec, ar)["experts-plot"].data  # one entry of the registry draws it


def empty_text(fig) -> str:
    assert not fig.data
    return fig.layout.annotations[0].text


def test_the_chart_says_why_it_is_empty(moe_pair, dense_pair):
    dense_spec, dense_ar = comparison(dense_pair)
    assert empty_text(charts.experts_figure(dense_spec, dense_ar)) == charts.DENSE == (
        "This pair is dense: every token uses the same weights, so there are no experts to count.")
    assert empty_text(charts.experts_figure([], dense_ar)) == charts.DENSE  # a trace of the baseline alone
    uncounted, _ = comparison(moe_pair)
    assert empty_text(charts.experts_figure(uncounted)) == charts.NOT_COUNTED
    vllm = [Start("speculative", 3, (1, 2, 3), {"backend": "vllm", "server": "http://x"})]
    assert "vLLM server does not report which experts" in empty_text(charts.experts_figure(vllm))
    old = [dataclasses.replace(dense_spec[0], settings={"drafter": "mtp"})] + dense_spec[1:]  # before counting
    assert empty_text(charts.experts_figure(old)) == charts.UNSAID
    assert empty_text(charts.experts_figure([])) == "Run a prompt to fill this chart."


def test_the_anatomy_panel_shows_the_experts(moe_pair, dense_pair):
    a = anatomy(moe_pair)
    x = a.experts
    assert (x.layers, x.num_experts, x.top_k, x.expert_width, x.mlp_width) == (4, 8, 2, 32, 128)
    assert x.active_width == 128 + 2 * 32
    page = anatomy_html(a)
    assert 'data-moe-layers="4" data-experts="8" data-top-k-experts="2"' in page
    assert "8 experts, top 2 per token" in page and "mixture of experts" in page
    assert anatomy(dense_pair).experts is None
    assert "data-moe-layers" not in anatomy_html(anatomy(dense_pair)) and 'data-experts="0"' in anatomy_html(
        anatomy(dense_pair))


def test_the_theory_panel_counts_experts_and_takes_the_measured_v(counted):
    """The theory panel and the what-if already take v from the run and its baseline
    (verify seconds per step ÷ the baseline's seconds per step); on a counted MoE run too."""
    spec, ar = counted
    check = theory_check(spec, ar)
    verify = [e.verify_seconds for e in spec if isinstance(e, Step) and e.step > 1 and e.draft_tokens > 0]
    plain = [e.verify_seconds for e in ar if isinstance(e, Step) and e.step > 1]
    assert check.v_raw == pytest.approx((sum(verify) / len(verify)) / (sum(plain) / len(plain)))
    assert check.v == (check.v_raw if check.v_raw >= 1 else None)
    touched = [s.mean for s in experts.expert_steps(spec) if s.draft_tokens > 0]
    assert check.experts_touched == pytest.approx(sum(touched) / len(touched))
    assert (check.experts_top_k, check.experts_total) == (2, 8)
    assert "experts per layer per verification" in theory.theory_panel_html(check)
    # Verification made to cost exactly 2.5 plain steps: that v reaches both predictions.
    t_ar = sum(plain) / len(plain)
    slow = [dataclasses.replace(e, verify_seconds=2.5 * t_ar) if isinstance(e, Step) and e.step > 1 else e
            for e in spec]
    check = theory_check(slow, ar)
    assert check.v == pytest.approx(2.5)
    assert check.speedup_predicted_v == pytest.approx(check.tau / (check.draft_tokens * check.c + 2.5))
    assert f"×{check.speedup_predicted_v:.2f} = τ/(γc+v)" in theory.theory_panel_html(check)
    w = what_if(check)
    assert w.slope == pytest.approx(1.5 / check.draft_tokens)
    full = list(w.alphas) + [w.alphas[-1]] * 12
    assert w.rows[3].speedup == pytest.approx(formulas.predicted_speedup_positional(full[:4], check.c + w.slope))
