"""Hostile peers: vLLM servers and hostile traces get one sentence, in bounded
time and memory.

The servers are small real HTTP servers on 127.0.0.1 (tests/hostile.py), as in
test_vllm_errors.py; every server loop is bounded in count and in time, so a test that
fails cannot hang.
"""
import json
import time

import pytest

import hostile
from hostile import MODELS, SECRET, SPEC_METRICS, trickle
from mtp_viz.errors import UserError
from mtp_viz.sources import http, prometheus
from mtp_viz.sources.vllm import client


@pytest.fixture
def serve():
    with hostile.serving() as start:
        yield lambda routes: start(routes)[1]


def _sentence(err: UserError) -> str:
    msg = str(err)
    assert "\n" not in msg and SECRET not in msg and "Traceback" not in msg
    assert msg.endswith(".") and len(msg) < 300
    return msg


# ------------------------------------------------------------- 1. /metrics bounds

HUGE_POSITION = ('vllm:spec_decode_num_drafts_total{model_name="m"} 3\n'
                 'vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="m",'
                 'position="1000000"} 1\n')


@pytest.mark.parametrize("page, words", [
    (HUGE_POSITION, "draft positions past 16"),
    (HUGE_POSITION.replace("1000000", "16"), "draft positions past 16"),
    (HUGE_POSITION.replace("1000000", "-1"), "draft positions past 16"),
    (SPEC_METRICS.replace(" 12\n", " NaN\n"), "not a sensible counter"),
    (SPEC_METRICS.replace(" 12\n", " +Inf\n"), "not a sensible counter"),
    (SPEC_METRICS.replace(" 12\n", " 1e308\n"), "not a sensible counter"),
    (SPEC_METRICS.replace(" 12\n", " -5\n"), "not a sensible counter"),
    (SPEC_METRICS + "vllm:generation_tokens_total{model_name=\"m\"} -Inf\n", "not a sensible counter"),
])
def test_metrics_pages_out_of_bounds_are_one_sentence(serve, page, words):
    """A scrape, as the dashboard and the probe make it, and the parser directly."""
    assert len(HUGE_POSITION) < 300
    url = serve({"/metrics": page})
    t0 = time.perf_counter()
    with pytest.raises(UserError) as e:
        client.scrape(url)
    assert time.perf_counter() - t0 < 20
    msg = _sentence(e.value)
    assert words in msg and url in msg and "1000000" not in msg and "1e308" not in msg
    with pytest.raises(UserError) as e:
        prometheus.spec_decode(prometheus.parse(page))
    assert words in _sentence(e.value)


def test_metrics_within_bounds_still_read(serve):
    page = SPEC_METRICS + "".join(
        f'vllm:spec_decode_num_accepted_tokens_per_pos_total{{model_name="m",position="{k}"}} {3 - k % 3}\n'
        for k in range(16)) + 'some_gauge{x="1"} NaN\n'   # other families may be NaN
    counters = client.scrape(serve({"/metrics": page}))
    assert counters.drafts == 3 and len(counters.accepted_per_pos) == 16


def test_a_metrics_page_over_the_size_cap_is_refused(serve, monkeypatch):
    monkeypatch.setattr(http, "MAX_PAGE_BYTES", 1000)
    url = serve({"/metrics": SPEC_METRICS + "# padding\n" * 200})
    with pytest.raises(UserError) as e:
        client.scrape(url)
    assert _sentence(e.value) == f"The server at {url} sent more than 1000 bytes for /metrics, more than mtp-viz reads."
    assert http.MAX_PAGE_BYTES == 1000 and client.scrape(serve({"/metrics": SPEC_METRICS})).drafts == 3


def test_a_metrics_page_trickled_a_byte_at_a_time_ends_at_the_page_deadline(serve, monkeypatch):
    """Each byte comes well inside the read timeout, so only a deadline for the whole page
    ends it (before, a 4 MiB page at this pace would have held the dashboard for days):
    the client hangs up with the deadline's sentence before the server has sent it all."""
    sent = []

    def slow(h):
        h.send_response(200)
        h.send_header("Content-Length", "200")
        h.end_headers()
        try:
            for _ in range(200):  # 200 bytes at 0.1 s: 20 s if nothing cut it
                h.wfile.write(b"#")
                h.wfile.flush()
                sent.append(1)
                time.sleep(0.1)
        except OSError:
            pass  # the client hung up at its deadline
    monkeypatch.setattr(http, "PAGE_DEADLINE", 1.5)
    url = serve({"/metrics": slow})
    with pytest.raises(UserError) as e:
        client.scrape(url, timeout=0.5)
    assert _sentence(e.value) == f"The server at {url} did not send its /metrics within 1.5 seconds."
    assert len(sent) < 200  # refused mid-page, not after reading it whole


def test_the_default_page_cap_is_4_mib():
    assert http.MAX_PAGE_BYTES == 4 * 1024 * 1024


# ------------------------------------------------------------- 2. stream deadlines

TOKEN_CHUNK = {"prompt_token_ids": [2, 3], "choices": [{
    "index": 0, "text": "x", "token_ids": [5], "finish_reason": None,
    "logprobs": {"tokens": ["x"], "token_logprobs": [-0.1]}}]}


def _vllm(serve, stream) -> str:
    return serve({"/v1/models": json.dumps(MODELS), "/metrics": SPEC_METRICS,
                  "/v1/completions": stream})


def _run(url, **kw):
    from mtp_viz.engine.events import Error
    from mtp_viz.sources.vllm.stream import generate
    t0 = time.perf_counter()
    events = list(generate(url, "def f():", max_new_tokens=8, **kw))
    assert time.perf_counter() - t0 < 12, "the deadline did not end the run; the server did"
    assert isinstance(events[-1], Error) and sum(isinstance(e, Error) for e in events) == 1
    msg = events[-1].message
    assert "\n" not in msg and SECRET not in msg and msg.endswith(".")
    return events, msg


def test_keep_alive_comments_do_not_hold_a_run_past_the_first_token_deadline(serve):
    url = _vllm(serve, trickle())
    events, msg = _run(url, first_token_deadline=1.5)
    assert len(events) == 1
    assert msg == (f"The server at {url} sent no token within 1.5 seconds; "
                   "MTP_VIZ_VLLM_FIRST_TOKEN_DEADLINE sets how long to wait.")


def test_a_silent_server_ends_at_the_first_token_deadline(serve):
    url = _vllm(serve, trickle(ping=b"", every=0.25, most=60))  # headers, then nothing
    _, msg = _run(url, first_token_deadline=1)
    assert "sent no token within 1 seconds" in msg


def test_a_stream_that_stalls_after_a_token_ends_at_the_total_deadline(serve, monkeypatch):
    monkeypatch.setenv("MTP_VIZ_VLLM_DEADLINE", "2")
    url = _vllm(serve, trickle(first=b"data: " + json.dumps(TOKEN_CHUNK).encode() + b"\n\n"))
    events, msg = _run(url)
    assert msg == (f"The server at {url} did not finish within 2 seconds; "
                   "MTP_VIZ_VLLM_DEADLINE sets how long to wait.")
    assert events[0].type == "start"


def test_the_first_token_deadline_comes_from_the_environment(serve, monkeypatch):
    monkeypatch.setenv("MTP_VIZ_VLLM_FIRST_TOKEN_DEADLINE", "1")
    monkeypatch.setenv("MTP_VIZ_VLLM_DEADLINE", "not a number")   # falls back to 300
    _, msg = _run(_vllm(serve, trickle()))
    assert "sent no token within 1 seconds" in msg


@pytest.mark.parametrize("value, seconds", [
    (None, 300.0), ("", 300.0), ("abc", 300.0), ("0", 300.0), ("-5", 300.0), ("inf", 300.0),
    ("nan", 300.0), ("2.5", 2.5), (" 90 ", 90.0)])
def test_deadline_environment_values(monkeypatch, value, seconds):
    if value is None:
        monkeypatch.delenv("MTP_VIZ_VLLM_DEADLINE", raising=False)
    else:
        monkeypatch.setenv("MTP_VIZ_VLLM_DEADLINE", value)
    assert client.env_seconds("MTP_VIZ_VLLM_DEADLINE", client.DEADLINE) == seconds
    assert client.DEADLINE == 300 and client.FIRST_TOKEN_DEADLINE == 60


# ------------------------------------------------------------- 3, 4. hostile traces

from mtp_viz.engine.events import Bonus, Done, Start, Step  # noqa: E402
from mtp_viz.sources import trace  # noqa: E402


def _run_events(**over):
    """A tiny valid speculative run; ``over`` replaces fields, as "line.field": value."""
    lines = [Start("speculative", 2, (5, 6), {"drafter": "mtp", "temperature": 0.0, "top_p": 1.0,
                                               "top_k": 0, "max_new_tokens": 8, "draft_tokens": 4,
                                               "clock": "wall", "seed": None}).to_dict(),
             Bonus(1, 7, "x", 0.5).to_dict(),
             Step(1, 0, 0, 1, t=0.01).to_dict(),
             Done(1, 1, 0.01, "x", generated_ids=(7,)).to_dict()]
    for key, value in over.items():
        n, field = key.split(".", 1)
        if field.startswith("settings."):
            lines[int(n) - 1]["settings"][field[9:]] = value
        else:
            lines[int(n) - 1][field] = value
    return "\n".join(json.dumps(d) for d in lines)


def _refused(text) -> str:
    with pytest.raises(UserError) as e:
        trace.loads(text)
    msg = str(e.value)
    assert "\n" not in msg and "secret" not in msg and msg.endswith(".")
    return msg


def test_a_valid_run_still_reads():
    assert [e.type for e in trace.loads(_run_events())] == ["start", "bonus", "step", "done"]


@pytest.mark.parametrize("over, sentence", [
    ({"3.t": 1e300}, "Line 3 of the trace has a 't' that is not a time from 0 to 24 hours."),
    ({"4.seconds": 1e300}, "Line 4 of the trace has a 'seconds' that is not a time from 0 to 24 hours."),
    ({"4.seconds": -1.0}, "Line 4 of the trace has a 'seconds' that is not a time from 0 to 24 hours."),
    ({"3.draft_seconds": 90000}, "Line 3 of the trace has a 'draft_seconds' that is not a time from 0 to 24 hours."),
    ({"3.verify_seconds": -0.5}, "Line 3 of the trace has a 'verify_seconds' that is not a time from 0 to 24 hours."),
    ({"3.step": -1}, "Line 3 of the trace has a 'step' that is not a count from 0 to a billion."),
    ({"2.step": -1}, "Line 2 of the trace has a 'step' that is not a count from 0 to a billion."),
    ({"4.new_tokens": -3}, "Line 4 of the trace has a 'new_tokens' that is not a count from 0 to a billion."),
    ({"1.prompt_tokens": -2}, "Line 1 of the trace has a 'prompt_tokens' that is not a count from 0 to a billion."),
    ({"4.generated_ids": [7, -1]},
     "Line 4 of the trace has a 'generated_ids' that is not a count from 0 to a billion."),
    ({"3.draft_tokens": 10**9, "3.accepted": 0},
     "Line 3 of the trace has a 'draft_tokens' that is not a draft length or position from 0 to 256."),
    ({"2.p": 7.5}, "Line 2 of the trace has a 'p' that is not a probability from 0 to 1."),
    ({"2.kind": "secret"}, "Line 2 of the trace has a 'kind' that is not one of its known values."),
    ({"4.stop_reason": "<img src=x onerror=secret>"},
     "Line 4 of the trace has a 'stop_reason' that is not one of its known values."),
    ({"3.accepted": 3, "3.draft_tokens": 1}, "Line 3 of the trace has a step that kept more drafts than it drafted."),
])
def test_absurd_times_and_negative_counts_are_one_sentence(over, sentence):
    assert _refused(_run_events(**over)) == sentence


@pytest.mark.parametrize("key, value, words", [
    ("temperature", {"secret": 1}, "a number from 0 to 100"),
    ("temperature", -1, "a number from 0 to 100"),
    ("temperature", True, "a number from 0 to 100"),
    ("top_p", 2, "a number from 0 to 1"),
    ("top_p", "0.9", "a number from 0 to 1"),
    ("top_k", 1.5, "a whole number from 0 to a billion"),
    ("max_new_tokens", -1, "a whole number from 0 to a billion"),
    ("draft_tokens", [4], "a whole number from 0 to 256"),
    ("draft_tokens", 10**6, "a whole number from 0 to 256"),
    ("seed", "secret", "a whole number or null"),
    ("clock", "sundial-secret", '"wall" or "cpu"'),
    ("drafter", {"secret": 1}, "text"),
    ("server_speculates", 1, "true or false"),
    ("target_precision", 8, "a precision's name or null"),
    ("drafter_precision", "int8" * 20, "a precision's name or null"),
])
def test_settings_the_views_read_are_checked(key, value, words):
    assert _refused(_run_events(**{f"1.settings.{key}": value})) == \
        f"Line 1 of the trace has a settings {key!r} that is not {words}."


def test_the_export_of_a_checked_trace_does_not_crash():
    """The export's description reads temperature, drafter, schedule and draft_tokens."""
    from mtp_viz.views import export
    spec = trace.loads(_run_events(**{"1.settings.temperature": 0.7, "1.settings.schedule": "constant"}))
    assert "sampling at temperature 0.7" in export._describe(spec[0])
    spec = trace.loads(_run_events(**{"1.settings.target_precision": "int8", "1.settings.drafter_precision": None}))
    assert export._describe(spec[0]).endswith("greedy · target in int8 · eager engine")
    assert export.steps_csv(spec).count("\n") == 2


def test_a_byte_order_mark_is_accepted(tmp_path):
    text = _run_events()
    assert trace.loads(b"\xef\xbb\xbf" + text.encode()) == trace.loads(text)
    path = tmp_path / "bom.jsonl"
    path.write_bytes(b"\xef\xbb\xbf" + trace.dumps(trace.loads(text)).encode())
    assert trace.read(path) == trace.loads(text)
    assert _refused("\ufeff\ufeff" + text) == "Line 1 of the trace is not JSON."   # only one, at the start


def test_deeply_nested_json_is_one_sentence():
    assert _refused("[" * 100_000) == "Line 1 of the trace is not JSON."


def test_the_shipped_examples_pass_the_checks():
    for path in sorted(trace.examples_dir().glob("*.jsonl")):
        assert trace.read(path)


# ------------------------------------------------------------- 5. CSV injection

@pytest.mark.parametrize("reason", ["=HYPERLINK(\"http://x\",\"y\")", "+1+cmd", "-2+3", "@SUM(A1)",
                                    "\t=1", "\r=1"])
def test_steps_csv_neutralizes_formulas_in_text_cells(reason):
    import csv
    import io

    from mtp_viz.views import export
    spec = trace.loads(_run_events(**{"3.reason": reason}))
    rows = list(csv.DictReader(io.StringIO(export.steps_csv(spec), newline="")))
    assert rows[0]["reason"] == "'" + reason.replace("\r", "\n")
    assert rows[0]["mode"] == "speculative" and rows[0]["cut"] == ""
    # the numbers the project writes stay numbers
    assert (rows[0]["step"], rows[0]["draft_tokens"], rows[0]["t_s"]) == ("1", "0", "0.010000")


def test_steps_csv_leaves_plain_text_and_numbers_alone():
    import csv
    import io

    from mtp_viz.views import export
    spec = [Start("speculative", 1, (1,), {}), Step(2, 4, 1, 2, reason="acceptance 25% < 50%: shorter",
                                                  cut="eos", t=0.5)]
    row = next(csv.DictReader(io.StringIO(export.steps_csv(spec), newline="")))
    assert row["reason"] == "acceptance 25% < 50%: shorter" and row["cut"] == "eos"
    assert row["rejected"] == "3"
    spec[1:] = [Step(2, 4, 1, 2, reason='x\r=HYPERLINK("http://x")\r\n+1', t=0.5)]
    rows = list(csv.DictReader(io.StringIO(export.steps_csv(spec), newline="")))
    assert len(rows) == 1 and rows[0]["reason"] == 'x\n=HYPERLINK("http://x")\n+1'   # one cell, one row
    bad = [Start("=cmd", 1, (1,), {}), Step(2, 1, 3, 2, cut="-x")]   # events built in code, unchecked
    row = next(csv.DictReader(io.StringIO(export.steps_csv(bad))))
    assert row["mode"] == "'=cmd" and row["cut"] == "'-x" and row["rejected"] == "-2"
