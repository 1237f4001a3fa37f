"""The predicted payoff from measured costs: Eq. 2 with t_draft and t_verify in place of c,
its break-even acceptance, the best draft length, and the run-level form with the prompt."""
import pytest

from mtp_viz.analysis import payoff
from mtp_viz.engine import theory

VERIFY = {1: 1.0, 2: 1.02, 3: 1.04, 4: 1.06, 5: 1.08}   # a weight-bound target: width is almost free


def test_flat_verification_and_a_free_drafter_is_the_expected_tokens():
    flat = {w: 1.0 for w in VERIFY}
    for a in (0.0, 0.5, 0.9):
        assert payoff.speedup(a, 4, 1.0, flat, 0.0) == pytest.approx(theory.expected_tokens(a, 4))


def test_it_is_leviathans_eq2_when_verification_costs_one_step():
    flat = {w: 1.0 for w in VERIFY}
    assert payoff.speedup(0.7, 3, 1.0, flat, 0.05) == pytest.approx(theory.predicted_speedup(0.7, 3, 0.05))


def test_break_even_is_where_the_speedup_is_one():
    for g in (1, 2, 4):
        a = payoff.break_even(g, 1.0, VERIFY, 0.1)
        assert payoff.speedup(a, g, 1.0, VERIFY, 0.1) == pytest.approx(1.0, abs=1e-4)
    assert payoff.break_even(4, 1.0, VERIFY, 2.0) is None            # a drafter as dear as the target never pays
    assert payoff.break_even(1, 1.0, {1: 1, 2: 0.5}, 0.0) == 0.0      # a verification cheaper than a step always does


def test_the_best_draft_length_grows_with_acceptance():
    low, high = payoff.best_draft_tokens(0.4, 1.0, VERIFY, 0.05), payoff.best_draft_tokens(0.95, 1.0, VERIFY, 0.05)
    assert low[0] < high[0] == 4 and high[1] > low[1]
    c = payoff.curves(1.0, VERIFY, 0.05, payoff.grid(0.25))
    assert c["alphas"] == [0.0, 0.25, 0.5, 0.75, 1.0] and sorted(c["speedup"]) == [1, 2, 3, 4]


def test_a_long_run_tends_to_the_per_token_speedup_and_a_short_one_pays_its_prompt():
    args = (0.7, 4, 1.0)
    per_token = payoff.speedup(*args, VERIFY, 0.05)
    long = payoff.run_speedup(0.7, 4, 10 ** 7, 1.0, 5.0, VERIFY, 0.05, 5.0)
    short = payoff.run_speedup(0.7, 4, 8, 1.0, 5.0, VERIFY, 0.05, 5.0)
    assert long == pytest.approx(per_token, rel=1e-4) and 1.0 < short < per_token
