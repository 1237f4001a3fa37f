import json

import pytest

from mtp_viz.analysis import metrics
from mtp_viz.engine import theory
from mtp_viz.engine.events import Accepted, Done, Drafted, Step, Token, event_from_dict
from streams import PLAN, ar_run, spec_stream


def test_counts_and_rates():
    ev = spec_stream(PLAN)
    assert metrics.acceptance_rate(ev) == pytest.approx(9 / 16)
    assert metrics.alpha_estimate(ev) == pytest.approx(9 / 12)
    assert metrics.per_step_acceptance(ev) == [None, 1.0, 0.5, 0.0, 0.75]
    # tokens: 1 (prefill) + 5 + 3 + 1 + 4 = 14 over 5 forwards: τ leaves the prefill out
    assert metrics.tau(ev) == pytest.approx((14 - 1) / (5 - 1))


def test_per_position_acceptance():
    ev = spec_stream(PLAN)
    # position: drafted, reached, accepted
    assert metrics.per_position_counts(ev) == [(4, 4, 3), (4, 3, 3), (4, 3, 2), (4, 2, 1)]
    assert metrics.per_position_acceptance(ev, conditional=True) == pytest.approx(
        [3 / 4, 1.0, 2 / 3, 1 / 2])
    assert metrics.per_position_acceptance(ev, conditional=False) == pytest.approx(
        [3 / 4, 3 / 4, 2 / 4, 1 / 4])
    # the product of conditionals is the unconditional acceptance
    cond = metrics.per_position_acceptance(ev)
    prod = 1.0
    for k, u in enumerate(metrics.per_position_acceptance(ev, conditional=False)):
        prod *= cond[k]
        assert prod == pytest.approx(u)


def test_cut_step_is_not_a_rejection():
    # all 4 drafts accepted by the target, but only 2 fit under the token limit
    cut = [Drafted(3, i, 10 + i) for i in range(4)] + [Accepted(3, i, 10 + i) for i in range(2)]
    cut.append(Step(3, 4, 4, new_tokens=2, cut="max_new_tokens"))
    ev = spec_stream([(4, 2)])
    ev = ev[:-1] + cut + [Done(new_tokens=6, target_forwards=3, seconds=1.0)]
    recs = metrics.step_records(ev)
    assert [r.rejected for r in recs] == [False, True, False]
    assert metrics.alpha_estimate(ev) == pytest.approx(6 / 7)
    assert metrics.per_position_counts(ev) == [(2, 2, 2), (2, 2, 2), (2, 2, 1), (2, 1, 1)]
    # a rejection whose correction was cut by the token limit is still a rejection
    ev = spec_stream([(4, 1, {"bonus": None, "cut": "max_new_tokens"})])
    assert metrics.step_records(ev)[-1].rejected
    # eos as a correction token in a cut step too
    ev = spec_stream([(4, 1, {"cut": "eos"})])
    assert metrics.step_records(ev)[-1].rejected


def test_pooled_streams_and_json_round_trip():
    a, b = spec_stream(PLAN[:2]), spec_stream(PLAN[2:])
    pooled = a + b
    assert metrics.acceptance_rate(pooled) == metrics.acceptance_rate(spec_stream(PLAN))
    assert metrics.tau(pooled) == pytest.approx((15 - 2) / (6 - 2))   # two prefills left out
    again = [event_from_dict(json.loads(json.dumps(e.to_dict()))) for e in pooled]
    assert metrics.summarize(again) == metrics.summarize(pooled)
    s = metrics.summarize(pooled)
    assert (s.generations, s.steps, s.drafted, s.accepted, s.rejections) == (2, 6, 16, 9, 3)
    assert s.mode == "speculative" and s.mean_draft_tokens == 4


def test_autoregressive_stream():
    ev = ar_run([""] * 10, 0.1)
    s = metrics.summarize(ev)
    assert s.steps == 0 and s.drafted == 0 and s.mode == "autoregressive"
    assert s.new_tokens == 10 and s.tau == 1.0
    assert s.tokens_per_second == pytest.approx(10.0)
    assert metrics.target_step_seconds(ev) == pytest.approx(0.1)
    # the prefill forward is not a decode step
    slow_prefill = [ev[0], Token(1, 7), Step(1, 0, 0, 1, verify_seconds=5.0)] + ev[3:]
    assert metrics.target_step_seconds(slow_prefill) == pytest.approx(0.1)


def test_cost_coefficient():
    plan = [(4, 4, {"draft_s": 0.02, "verify_s": 0.2}), (2, 0, {"draft_s": 0.01, "verify_s": 0.1})]
    ev = spec_stream(plan)
    assert metrics.drafter_seconds_per_token(ev) == pytest.approx(0.005)
    assert metrics.cost_coefficient(ev, ar_run([""] * 5, 0.1)) == pytest.approx(0.05)
    # without a baseline, the mean verification time stands in for a target step
    assert metrics.cost_coefficient(ev) == pytest.approx(0.005 / 0.15)


def test_theory_check_uses_measured_numbers():
    # verification of 4 drafts costs 0.15 s against 0.1 s per autoregressive step: v = 1.5
    ev = spec_stream([(4, 4, {"draft_s": 0.004, "verify_s": 0.15})] * 3 + [(4, 1, {"verify_s": 0.15})])
    chk = metrics.theory_check(ev, ar_run([""] * 5, 0.1))
    alpha = metrics.alpha_estimate(ev)
    assert chk.alpha == alpha and chk.draft_tokens == 4
    assert chk.tau_predicted == pytest.approx(theory.expected_tokens(alpha, 4))
    assert chk.c == pytest.approx(metrics.cost_coefficient(ev, ar_run([""] * 5, 0.1)))
    assert chk.v == pytest.approx(1.5)
    assert chk.speedup_predicted_v == pytest.approx(chk.tau / (4 * chk.c + 1.5))
    assert (chk.optimal_draft_tokens, chk.speedup_star) == theory.optimal_draft_tokens(alpha, chk.c, 16)
    assert metrics.theory_check(ar_run([""] * 3, 0.1)) is None


def test_theory_check_calls_a_sub_unit_verification_cost_noise():
    # a verification measured faster than one autoregressive step is not a cost
    ev = spec_stream([(4, 4, {"draft_s": 0.004, "verify_s": 0.08})] * 3)
    chk = metrics.theory_check(ev, ar_run([""] * 5, 0.1))
    assert chk.v is None and chk.speedup_predicted_v is None
    assert chk.v_raw == pytest.approx(0.8)


def test_drift_is_the_share_of_text_after_the_first_difference():
    ref = [[1, 2, 3, 4], [5, 6, 7, 8], [9, 9]]
    assert metrics.drift(ref, ref) == 0
    # 1 − 2/4 = 0.5; 1 − 0/4 = 1; a run cut short by an EOS: 1 − 1/2 = 0.5
    assert metrics.drift([[1, 2, 0, 4], [0, 6, 7, 8], [9]], ref) == pytest.approx((0.5 + 1 + 0.5) / 3)
    assert metrics.drift([], []) is None
    with pytest.raises(ValueError):
        metrics.drift([[1]], ref)  # one output per reference
