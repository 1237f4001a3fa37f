"""`mtp-viz profile --engine llama.cpp`'s arithmetic on recorded timings (no server): a reply's
timings read and checked, a step's count, the drafter's cost by difference, the check of a
measured run against the prediction at the α it realised, llama.cpp's synthetic rates, and the
CLI's sentences for a missing export. Against a real llama-server: tests/sources/test_profile_llamacpp.py."""
import math

import pytest

from mtp_viz.analysis import payoff
from mtp_viz.engine import theory
from mtp_viz.errors import UserError
from mtp_viz.measure.llamacpp_profile import Costs, Timings, check, synth_rates

# recorded from llama-server (build 11434) on the bundled pair, MTP with 4 drafts at synthetic
# acceptance 0.7, 200 new tokens: its last chunk's timings
RECORDED = {"prompt_n": 8, "prompt_ms": 21.4, "predicted_n": 200, "predicted_ms": 545.1, "draft_n": 319,
            "draft_n_accepted": 118, "predicted_per_second": 366.9}


def test_a_replys_timings_are_read_and_its_steps_counted():
    t = Timings.of({"timings": RECORDED})
    assert (t.prompt_n, t.predicted_n, t.draft_n, t.draft_n_accepted) == (8, 200, 319, 118)
    assert t.steps == 200 - 118          # each step: its accepted drafts and one token of the target's
    assert t.per_token == pytest.approx(0.5451 / 200)
    plain = Timings.of({"timings": {"prompt_n": 8, "prompt_ms": 20.0, "predicted_n": 64, "predicted_ms": 256.0}})
    assert (plain.draft_n, plain.steps) == (0, 64)


@pytest.mark.parametrize("bad", [None, "x", {"timings": None}, {"timings": {"prompt_n": 8}},
                                 {"timings": {**RECORDED, "predicted_ms": -1}},
                                 {"timings": {**RECORDED, "predicted_n": True}},
                                 {"timings": {**RECORDED, "prompt_ms": float("nan")}},
                                 {"timings": {**RECORDED, "draft_n": "319"}},
                                 {"timings": {**RECORDED, "predicted_ms": 1e300}}])
def test_a_hostile_or_broken_reply_is_one_sentence(bad):
    with pytest.raises(UserError) as e:
        Timings.of(bad)
    said = str(e.value)
    assert said.startswith("The llama.cpp server") and said.endswith(".") and ". " not in said


def costs(draft=0.0011):
    # widths' seconds as a real shape's grow: a verification of w tokens a little more than a step
    return Costs("llama.cpp f32", 0.0040, {w: 0.0040 + 0.0004 * (w - 1) for w in range(1, 10)}, draft, 2, {})


def test_a_measured_run_is_checked_at_the_acceptance_it_realised():
    run = Timings.of({"timings": RECORDED})
    plain_tps = 250.0
    k = check("set acceptance 0.7", [run, run, run], plain_tps, costs(), 4, 0.7)
    tau = 200 / 82
    alpha = theory.alpha_from_tau(tau, 4)
    assert k.tau == pytest.approx(tau) and k.realized_alpha == pytest.approx(alpha)
    # the prediction is payoff's over these costs, at that α; measured is decode rate over plain's
    assert k.predicted == pytest.approx(payoff.speedup(alpha, 4, 0.0040, costs().verify, 0.0011))
    assert k.decode_tokens_per_second == pytest.approx(200 / 0.5451)
    assert k.measured == pytest.approx(200 / 0.5451 / plain_tps)
    assert k.measured_over_predicted == pytest.approx(k.measured / k.predicted)
    # a run of pure rejections: τ = 1, α = 0, the cost side alone
    none = Timings.of({"timings": {**RECORDED, "draft_n_accepted": 0}})
    k0 = check("its own drafter", [none], plain_tps, costs(), 4, None)
    assert k0.tau == 1.0 and k0.realized_alpha == 0.0
    assert k0.predicted == pytest.approx(0.0040 / (4 * 0.0011 + costs().verify[5]))


def test_the_drafter_costs_what_a_step_is_beyond_its_verification():
    """measure_costs' rule, t_draft = (step − verify[γ + 1]) / γ, on a run drafting 2 a step."""
    from mtp_viz.measure import llamacpp_profile
    c = costs()
    g = llamacpp_profile.CALIBRATE_DRAFTS
    step = g * 0.0011 + c.verify[g + 1]
    assert (step - c.verify[g + 1]) / g == pytest.approx(0.0011)


def test_synthetic_rates_are_unconditional_powers_of_alpha():
    assert synth_rates(0.7, 4) == "0.700000,0.490000,0.343000,0.240100"
    rates = [float(r) for r in synth_rates(0.5, 3).split(",")]
    # llama.cpp keeps draft i given draft i − 1 with probability rate_i / rate_(i−1): α each time
    assert [rates[0]] + [b / a for a, b in zip(rates, rates[1:])] == pytest.approx([0.5, 0.5, 0.5])
    assert math.isclose(sum(rates) + 1, theory.expected_tokens(0.5, 3))


def test_the_cli_asks_for_the_export_in_one_sentence(tmp_path, capsys):
    from mtp_viz.cli.main import main
    for argv, said in ((["profile", "--engine", "llama.cpp"], "needs --gguf DIR"),
                       (["profile", "--engine", "llama.cpp", "--gguf", str(tmp_path)], "needs --gguf DIR"),
                       (["profile", "--gguf", str(tmp_path)], "go with --engine llama.cpp")):
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert said in err and str(tmp_path) not in err
