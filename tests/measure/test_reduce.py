"""The reduction every surface's speedup goes through (measure.reduce), on records written
out by hand: rates pooled over a repeat's prompts before dividing, medians over repeats,
the one verdict rule, the fastest plain decoder, the overhead over transformers."""
import pytest

from mtp_viz.measure import reduce
from mtp_viz.measure.records import AUTOREGRESSIVE, REFERENCE, SPECULATIVE, Record

SETTING = "constant-4"


def rec(mode, seconds, tokens, repeat, prompt="p", prefill=None, cpu=None, category=""):
    return Record(mode=mode, seconds=seconds, new_tokens=tokens, target_forwards=tokens, repeat=repeat,
                  prompt_id=prompt, setting="" if mode == AUTOREGRESSIVE else SETTING, prefill_seconds=prefill,
                  cpu_seconds=cpu, category=category)


def test_a_repeats_rate_pools_its_prompts_before_dividing():
    # two prompts in one repeat: 10 tokens in 1 s and 30 tokens in 5 s pool to 40 / 6, not the
    # mean of 10 and 6 tok/s
    rs = [rec(AUTOREGRESSIVE, 1.0, 10, 0, "a"), rec(AUTOREGRESSIVE, 5.0, 30, 0, "b")]
    assert reduce.tps_by_repeat(rs, AUTOREGRESSIVE) == {0: pytest.approx(40 / 6)}


def test_decode_only_rates_leave_out_the_prefill_and_its_token():
    rs = [rec(AUTOREGRESSIVE, 2.0, 11, 0, prefill=1.0)]
    assert reduce.tps_by_repeat(rs, AUTOREGRESSIVE, decode=True) == {0: pytest.approx(10 / 1.0)}
    # a run without a prefill time (a server's) cannot be split, so it is left out of decode rates
    assert reduce.tps_by_repeat([rec(AUTOREGRESSIVE, 2.0, 11, 0)], AUTOREGRESSIVE, decode=True) == {}


def test_speedups_are_per_repeat_ratios_and_their_median():
    rs = [rec(AUTOREGRESSIVE, 1.0, 10, r) for r in range(3)]
    rs += [rec(SPECULATIVE, s, 10, r) for r, s in enumerate((0.5, 0.4, 0.8))]   # x2, x2.5, x1.25
    assert reduce.speedup_ratios(rs, SPECULATIVE, SETTING) == pytest.approx([2.0, 2.5, 1.25])
    assert reduce.speedup(rs, SPECULATIVE, SETTING) == pytest.approx(2.0)
    # a repeat whose plain run is missing gives no ratio, rather than one over another repeat's
    assert reduce.speedup_ratios(rs[1:], SPECULATIVE, SETTING) == pytest.approx([2.5, 1.25])


def test_a_category_is_reduced_on_its_own():
    rs = [rec(AUTOREGRESSIVE, 1.0, 10, 0, category="code"), rec(AUTOREGRESSIVE, 1.0, 10, 0, "q", category="chat"),
          rec(SPECULATIVE, 0.5, 10, 0, category="code"), rec(SPECULATIVE, 2.0, 10, 0, "q", category="chat")]
    assert reduce.speedup(rs, SPECULATIVE, SETTING, category="code") == pytest.approx(2.0)
    assert reduce.speedup(rs, SPECULATIVE, SETTING, category="chat") == pytest.approx(0.5)
    assert reduce.speedup(rs, SPECULATIVE, SETTING) == pytest.approx(20 / 2.5 / 10)


@pytest.mark.parametrize("ratios, said", [
    ([1.2], reduce.NO_CALL), ([], reduce.NO_CALL), ([1.1, 1.3, 1.01], "faster"), ([0.9, 0.99], "slower"),
    ([0.98, 1.05, 1.2], "too close to call"), ([1.0, 1.2], "too close to call")])
def test_the_verdict_calls_only_what_every_repeat_agrees_on(ratios, said):
    assert reduce.verdict(ratios) == said


def test_the_fastest_plain_decoder_is_the_highest_rate_measured():
    assert reduce.fastest({"eager": 3.0, "compiled": 9.5, "llama.cpp q8_0": 6.1}) == {
        "decoder": "compiled", "tokens_per_second": 9.5}
    assert reduce.fastest({"eager": 3.0, "peer": None}) == {"decoder": "eager", "tokens_per_second": 3.0}
    assert reduce.fastest({"peer": None}) is None


def test_the_overhead_over_transformers_pools_a_repeat_then_takes_the_median():
    rs = [rec(SPECULATIVE, 1.0, 10, 0, "a"), rec(SPECULATIVE, 3.0, 10, 0, "b"), rec(REFERENCE, 2.0, 10, 0, "a"),
          rec(REFERENCE, 2.0, 10, 0, "b"), rec(SPECULATIVE, 1.0, 10, 1), rec(REFERENCE, 4.0, 10, 1)]
    assert reduce.overhead(rs, SETTING) == pytest.approx((4 / 4 + 1 / 4) / 2)
    rs_cpu = [rec(SPECULATIVE, 9.0, 10, 0, cpu=1.0), rec(REFERENCE, 9.0, 10, 0, cpu=2.0)]
    assert reduce.overhead(rs_cpu, SETTING, key="cpu_seconds") == pytest.approx(0.5)
    assert reduce.overhead([rec(SPECULATIVE, 1.0, 10, 0)], SETTING) is None   # nothing to divide by
