import math
import random

import pytest

from mtp_viz.engine import theory
from mtp_viz.engine.schedules import OptimalSchedule, make_schedule


def test_expected_tokens_matches_geometric_sum():
    for alpha in (0.0, 0.3, 0.8, 0.999):
        for draft_tokens in range(0, 9):
            assert theory.expected_tokens(alpha, draft_tokens) == pytest.approx(
                sum(alpha ** k for k in range(draft_tokens + 1)))
    assert theory.expected_tokens(1.0, 4) == 5.0


def test_predicted_speedup_known_values():
    # Leviathan et al. Fig. 3 style numbers: alpha 0.8, draft_tokens 4, c 0.05 -> 3.36/1.2 = 2.80
    assert theory.predicted_speedup(0.8, 4, 0.05) == pytest.approx(3.3616 / 1.2)
    assert theory.predicted_speedup(0.0, 3, 0.1) == pytest.approx(1 / 1.3)
    assert theory.predicted_speedup(0.5, 1, 0.0) == pytest.approx(1.5)


def test_positional_reduces_to_constant_alpha():
    assert theory.expected_tokens_positional([0.7] * 5) == pytest.approx(
        theory.expected_tokens(0.7, 5))
    assert theory.expected_tokens_positional([1.0, 0.5, 0.0]) == pytest.approx(1 + 1 + 0.5)


def test_optimal_draft_tokens_brute_force():
    for alpha in (0.2, 0.5, 0.8, 0.9, 0.95):
        for c in (0.01, 0.05, 0.2, 0.5):
            g, s = theory.optimal_draft_tokens(alpha, c, cap=20)
            best = max(range(1, 21), key=lambda k: theory.predicted_speedup(alpha, k, c))
            assert g == best
            assert s == pytest.approx(theory.predicted_speedup(alpha, best, c))
    # cheap, accurate drafter: long drafts; expensive or bad drafter: short drafts
    assert theory.optimal_draft_tokens(0.95, 0.01, cap=16)[0] >= 10
    assert theory.optimal_draft_tokens(0.3, 0.5, cap=16)[0] == 1
    # a drafter whose second guess is always wrong should draft one token
    assert theory.optimal_draft_tokens([0.9, 0.0], 0.01, cap=8)[0] == 1


def test_alpha_mle_and_inverse():
    assert theory.alpha_mle(6, 2) == 0.75
    assert theory.alpha_mle(0, 0) == 0.0
    for alpha in (0.1, 0.5, 0.9):
        tau = theory.expected_tokens(alpha, 4)
        assert theory.alpha_from_tau(tau, 4) == pytest.approx(alpha, abs=1e-6)
    assert theory.alpha_from_tau(1.0, 4) == 0.0
    assert theory.alpha_from_tau(5.0, 4) == 1.0


def test_alpha_from_acceptance_inverts_accepted_over_drafted():
    # a step of γ drafts accepts E(α, γ) − 1 of them: the rate is (E − 1)/γ, below α for γ > 1
    for g in (1, 2, 3, 4, 8):
        for alpha in (0.05, 0.3, 0.62, 0.9, 0.99):
            rate = (theory.expected_tokens(alpha, g) - 1) / g
            assert theory.alpha_from_acceptance(rate, g) == pytest.approx(alpha, abs=1e-6)
            assert rate <= alpha + 1e-12 and (g == 1) == (rate == pytest.approx(alpha))
            # the same α through τ: one model, two ways of publishing it
            assert theory.alpha_from_tau(1 + g * rate, g) == pytest.approx(theory.alpha_from_acceptance(rate, g))
    assert theory.alpha_from_acceptance(0.0, 4) == 0.0 and theory.alpha_from_acceptance(1.0, 4) == 1.0
    with pytest.raises(ValueError):
        theory.alpha_from_acceptance(0.5, 0)


def test_alpha_mle_recovers_alpha_from_simulated_steps():
    rng = random.Random(0)
    alpha, draft_tokens = 0.7, 4
    acc = rej = 0
    for _ in range(5000):
        a = 0
        while a < draft_tokens and rng.random() < alpha:
            a += 1
        acc += a
        rej += a < draft_tokens
    assert theory.alpha_mle(acc, rej) == pytest.approx(alpha, abs=0.02)
    assert acc / (draft_tokens * 5000) < alpha - 0.1  # plain acceptance rate is biased low


def test_optimal_schedule_is_registered_and_adapts():
    sch = make_schedule("optimal", initial=4, cap=12)
    assert isinstance(sch, OptimalSchedule) and sch.name == "optimal"
    assert sch.start() == 4
    # always accepted, cheap drafting, flat verification -> long drafts
    for _ in range(30):
        n, reason = sch.update(drafted=sch.current, accepted=sch.current,
                               draft_seconds=0.001 * sch.current, verify_seconds=0.1)
    assert n == 12 and "γ*" in reason
    # now everything is rejected at the first position -> shortest drafts
    for _ in range(200):
        n, _ = sch.update(drafted=sch.current, accepted=0,
                          draft_seconds=0.001 * sch.current, verify_seconds=0.1)
    assert n == 1


def test_optimal_schedule_uses_measured_cost():
    def run(draft_cost):
        sch = make_schedule("optimal", initial=4, cap=16)
        sch.start()
        rng = random.Random(1)
        for _ in range(300):
            g = sch.current
            a = 0
            while a < g and rng.random() < 0.8:
                a += 1
            sch.update(drafted=g, accepted=a, draft_seconds=draft_cost * g, verify_seconds=1.0)
        return sch
    cheap, dear = run(0.01), run(0.5)
    assert cheap.alpha() == pytest.approx(0.8, abs=0.08)
    assert cheap.cost()[0] == pytest.approx(0.01, rel=0.05)
    assert dear.cost()[0] == pytest.approx(0.5, rel=0.05)
    assert cheap.current > dear.current
    assert dear.current == theory.optimal_draft_tokens(0.8, 0.5, 16)[0] or dear.current <= 2


def test_optimal_schedule_learns_verification_slope():
    sch = make_schedule("optimal", initial=4, cap=16)
    sch.start()
    for g in [1, 2, 4, 8] * 10:  # verify time 1 + 0.25 draft_tokens
        sch.update(drafted=g, accepted=g, draft_seconds=0.0, verify_seconds=1 + 0.25 * g)
    T, s = sch.verify_line()
    assert T == pytest.approx(1.0, rel=1e-6) and s == pytest.approx(0.25, rel=1e-6)
    assert not math.isnan(sch.alpha())


def test_optimal_schedule_ignores_steps_without_drafts():
    sch = make_schedule("optimal", initial=6, cap=12)
    assert sch.start() == 6
    # the engine's prefill step drafts nothing and carries the prefill time
    assert sch.update(drafted=0, accepted=0, draft_seconds=0.0, verify_seconds=9.0)[0] == 6
    assert sch.verify_line() == (0.0, 0.0)
