"""The traffic sweep's pieces without a server: its levels, its one-sentence refusals (in
the CLI, exit status 2), the speedup arithmetic, and the Traffic panel's lock-down. The
sweep itself runs against real vLLM servers in sources/test_vllm.py and
app/test_vllm_ui.py (marked vllm)."""
from __future__ import annotations

import pytest

from mtp_viz.cli.main import main
from mtp_viz.errors import UserError
from mtp_viz.measure import traffic


def test_levels_are_sorted_whole_numbers_up_to_16():
    assert traffic.parse_levels("8, 1,2,4,2") == [1, 2, 4, 8]
    for bad in ("", "0", "17", "1,x", "2.5", "-1"):
        with pytest.raises(UserError, match="whole numbers from 1 to 16"):
            traffic.parse_levels(bad)


@pytest.mark.parametrize("argv, words", [
    (["--server", "http://127.0.0.1:9", "--concurrency", "1,2"], "give --baseline-server too"),
    (["--server", "http://127.0.0.1:9", "--baseline-server", "http://127.0.0.1:9", "--concurrency", "0"],
     "whole numbers from 1 to 16"),
])
def test_the_cli_refuses_a_bad_sweep_before_contacting_anything(argv, words, capsys):
    assert main(["bench", *argv]) == 2
    err = capsys.readouterr().err
    assert words in err and err.count("\n") == 1


def _row(concurrency, server, tokens_per_second, tpot_ms_p50):
    return traffic.TrafficRow(concurrency, server, 4, tokens_per_second, None, None, tpot_ms_p50, None, None, None)


def test_speedup_and_the_per_user_ratio_pair_each_level():
    rows = [_row(1, "speculative", 200.0, 4.0), _row(1, "baseline", 100.0, 10.0), _row(2, "speculative", 150.0, None)]
    out = traffic.pair_rows(rows)
    assert out[0].speedup == 2.0 and out[0].tpot_ratio == 2.5
    assert out[1].speedup is None and out[2].speedup is None  # no baseline at level 2
    assert list(out[0].as_dict()) == [  # bench.json's traffic row, key for key
        "concurrency", "server", "requests", "tokens_per_second", "ttft_ms_p50", "ttft_ms_p90", "tpot_ms_p50",
        "tpot_ms_p90", "acceptance_rate", "tau", "speedup", "tpot_ratio"]


def test_a_row_counts_ttft_tpot_acceptance_and_tau_from_its_requests():
    level = traffic.Level(2, "speculative", wall=2.0, done=[
        traffic.Request(0, tokens=11, seconds=1.1, ttft=0.1, drafted=12, accepted=6, verify_steps=3),
        traffic.Request(1, tokens=5, seconds=0.5, ttft=0.3, drafted=4, accepted=2, verify_steps=1)])
    r = traffic.row(level)
    assert r.requests == 2 and r.tokens_per_second == 8.0
    assert r.tpot_ms_p50 == pytest.approx(50.0) and r.tpot_ms_p90 == pytest.approx(100.0)
    assert r.acceptance_rate == 0.5 and r.tau == (16 - 2) / 4
    assert r.ttft_ms_p50 == pytest.approx(100.0)


def test_the_traffic_panel_contacts_only_listed_servers_when_locked_down():
    from mtp_viz.app.handlers.traffic import TrafficHandlers
    from mtp_viz.app.runtime.deploy import AllowList
    from mtp_viz.app.runtime.guard import ServerPolicy
    th = TrafficHandlers(ServerPolicy(AllowList("tiny"), "http://127.0.0.1:8000"))
    (status, *_rest), = list(th.sweep("http://10.0.0.1:8000", "http://127.0.0.1:8000", "1", 4, 16, None))
    assert "only connects to the vLLM servers it lists" in status
    # locked down, the sweep's bounds are MTP_VIZ_TRAFFIC_LEVELS' and MTP_VIZ_TRAFFIC_REQUESTS' defaults
    (status, *_rest), = list(th.sweep("http://127.0.0.1:8000", "http://127.0.0.1:8000", "1,99", 4, 16, None))
    assert "whole numbers from 1 to 4" in status
    (status, *_rest), = list(th.sweep("http://127.0.0.1:8000", "http://127.0.0.1:8000", "1", 0, 16, None))
    assert "Requests per level must be a whole number from 1 to 8" in status


def test_a_request_stop_cut_is_not_measured_and_a_finished_one_is():
    """Stop can land before a request's first token (the source yields nothing) or mid-way
    (it ends "stopped"): neither is a measurement; a finished request is."""
    from mtp_viz.engine.events import Done, Step, Token
    finished = [Token(1, 7, "a", 0.9, 0.1), Step(1, 0, 0, 1, t=0.1),
                Done(new_tokens=1, target_forwards=1, seconds=0.2, stop_reason="max_new_tokens",
                     generated_ids=(7,))]
    cut = [*finished[:2], Done(new_tokens=1, target_forwards=1, seconds=0.2, stop_reason="stopped")]
    assert traffic._request([], 0) is None and traffic._request(cut, 0) is None
    r = traffic._request(finished, 3)
    assert (r.prompt, r.tokens, r.ids, r.ttft) == (3, 1, (7,), 0.1)
