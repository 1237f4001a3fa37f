"""Traces: writing and reading JSON lines, traces the CLI made, and every bad-trace sentence."""
import contextlib
import io
import json

import pytest

from factories import save_gemma_pair
from mtp_viz.cli.main import main
from mtp_viz.engine.events import Accepted, Bonus, Done, Start, Step, Token
from mtp_viz.errors import UserError
from mtp_viz.sources import trace

PROMPT = " ".join(f"w{i}" for i in range(10, 40))


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    return save_gemma_pair(tmp_path_factory.mktemp("pair"))


@pytest.fixture(scope="module")
def cli_runs(pair):
    """What `mtp-viz generate --jsonl` prints, speculative and autoregressive."""
    outs = []
    for extra in ([], ["--autoregressive"]):
        buf = io.StringIO()
        with contextlib.redirect_stdout(buf):
            assert main(["generate", "--target", str(pair[0]), "--prompt", PROMPT, "--max-new-tokens", "10",
                         "--jsonl", *extra]) == 0
        outs.append(buf.getvalue())
    return outs


def small_run() -> list:
    return [Start(mode="speculative", prompt_tokens=2, prompt_ids=(5, 6), settings={"drafter": "mtp"}),
            Bonus(step=1, token_id=7, text="<b>x</b>", p=0.5, kind="extension"),
            Step(step=1, draft_tokens=0, accepted=0, new_tokens=1, t=0.01),
            Accepted(step=2, index=0, token_id=8, text="é", p=0.9, q=0.8),
            Bonus(step=2, token_id=9, text="\n", p=0.7, index=1),
            Step(step=2, draft_tokens=1, accepted=1, new_tokens=2, t=0.02),
            Done(new_tokens=3, target_forwards=2, seconds=0.02, generated_ids=(7, 8, 9))]


def ar_run() -> list:
    return [Start(mode="autoregressive", prompt_tokens=2, prompt_ids=(5, 6)),
            Token(step=1, token_id=7, text="a", t=0.01), Step(step=1, draft_tokens=0, accepted=0, t=0.01),
            Done(new_tokens=1, target_forwards=1, seconds=0.01, generated_ids=(7,))]


def test_round_trip_keeps_every_event_and_the_header(tmp_path):
    events = small_run() + ar_run()
    path = trace.write(tmp_path / "t.jsonl", events)
    first = json.loads(path.read_text(encoding="utf-8").splitlines()[0])
    assert first["type"] == "trace" and first["format"] == "mtp-viz-trace" and first["version"] == 1
    assert trace.read(path) == events
    assert trace.spec_and_ar(events) == (small_run(), ar_run())
    assert [r[0].mode for r in trace.split_runs(events)] == ["speculative", "autoregressive"]


def test_a_cli_made_trace_reads_without_a_header(cli_runs):
    spec_text, ar_text = cli_runs
    assert not spec_text.startswith('{"type": "trace"')       # generate --jsonl stays bare events
    spec, ar = trace.spec_and_ar(trace.loads(spec_text + ar_text))
    assert spec[0].mode == "speculative" and isinstance(spec[-1], Done)
    assert ar[0].mode == "autoregressive" and ar[-1].generated_ids == spec[-1].generated_ids
    assert trace.loads(trace.dumps(spec + ar)) == spec + ar
    assert trace.spec_and_ar(trace.loads(ar_text)) == ([], ar)


HEAD = json.dumps(trace.header())
GOOD = "\n".join(json.dumps(e.to_dict()) for e in small_run())


@pytest.mark.parametrize("text, sentence", [
    ("", "The trace holds no events."),
    (HEAD, "The trace holds no events."),
    ("not json at all /etc/passwd", "Line 1 of the trace is not JSON."),
    (HEAD + "\n[1, 2]", "Line 2 of the trace is not a JSON object."),
    (HEAD + '\n{"type": "launch_missiles"}', "Line 2 of the trace has an unknown event type."),
    ('{"type": "start", "mode": "speculative", "prompt_tokens": "secret"}',
     "Line 1 of the trace has a field of the wrong type."),
    ('{"type": "start", "mode": "speculative", "prompt_tokens": NaN}',
     "Line 1 of the trace is not JSON."),
    ('{"type": "start", "mode": "speculative"}', "Line 1 of the trace misses a field its event needs."),
    ('{"type": "trace", "format": "mtp-viz-trace", "version": 99}\n' + GOOD,
     "The trace has an unknown format version; this mtp-viz reads version 1."),
    ('{"type": "trace", "format": "other", "version": 1}\n' + GOOD, "The file is not an mtp-viz trace."),
    (GOOD + "\n" + HEAD, "Line 8 of the trace is a header, which only the first line may be."),
    ('{"type": "step", "step": 1, "draft_tokens": 0, "accepted": 0}', "The trace does not begin with a start event."),
    (GOOD + "\n" + GOOD, "The trace holds two runs of the same mode; a trace holds at most one of each."),
    (GOOD + '\n{"type": "step", "step": 3, "draft_tokens": 0, "accepted": 0}',
     "The trace has events after a run ended that do not start a new run."),
    ('{"type": "start", "mode": "secret-mode", "prompt_tokens": 1}', "A run in the trace has an unknown mode."),
])
def test_bad_traces_get_one_sentence(text, sentence):
    with pytest.raises(UserError) as e:
        trace.loads(text)
    assert str(e.value) == sentence
    assert "secret" not in str(e.value) and "passwd" not in str(e.value)


def test_size_caps_and_unreadable_files(tmp_path, monkeypatch):
    big = tmp_path / "big.jsonl"
    big.write_bytes(b" " * (trace.MAX_BYTES + 1))
    with pytest.raises(UserError, match=r"^The trace is larger than 5 MB, the most this app reads\.$"):
        trace.read(big)
    with pytest.raises(UserError, match=r"^The trace is not UTF-8 text\.$"):
        trace.loads(b"\xff\xfe")
    monkeypatch.setattr(trace, "MAX_EVENTS", 3)
    with pytest.raises(UserError, match=r"^The trace has more than 3 events, the most this app reads\.$"):
        trace.loads(GOOD)
    with pytest.raises(UserError) as e:
        trace.read(tmp_path / "secret" / "missing.jsonl")
    assert str(e.value) == "There is no trace file named missing.jsonl."   # its name, not its folder
    with pytest.raises(UserError) as e:
        trace.read(tmp_path)
    assert str(e.value) == f"{tmp_path.name} is a folder, not a trace file."


def test_replay_plays_a_cli_trace_styled_with_its_summary(cli_runs, tmp_path, capsys):
    spec_text, ar_text = cli_runs
    path = tmp_path / "cli.jsonl"
    path.write_text(spec_text + ar_text, encoding="utf-8")
    assert main(["replay", str(path), "--speed", "1e6", "--color", "always"]) == 0
    out = capsys.readouterr().out
    spec, ar = trace.spec_and_ar(trace.read(path))
    lines = out.splitlines()
    assert lines[0] == "[speculative]" and "[autoregressive]" in lines
    assert "\x1b[32m" in out or "\x1b[1;4;33m" in out        # tokens styled by kind
    summaries = [line for line in lines if line.endswith("tokens/s")]
    assert len(summaries) == 2 and summaries[0].startswith(f"{spec[-1].new_tokens} new tokens")
    assert "".join(e.text for e in ar if e.type == "token") in out


def test_replay_waits_for_recorded_times():
    from mtp_viz.cli.replay import played
    now = [0.0]
    seen = []
    for e in played(small_run(), speed=0.5, clock=lambda: now[0], sleep=lambda s: now.__setitem__(0, now[0] + s)):
        seen.append((e.type, round(now[0], 2)))
    assert seen[0] == ("start", 0.0)
    assert ("bonus", 0.02) in seen and seen[-1] == ("done", 0.04)   # step 2 at t=0.02, half speed


@pytest.mark.parametrize("argv, sentence", [
    (["replay", "/no/such/nothere.jsonl"], "mtp-viz: error: There is no trace file named nothere.jsonl.\n"),
    (["replay", "TRACE", "--speed", "0"], "mtp-viz: error: --speed must be a positive number.\n"),
    (["replay", "BAD"], "mtp-viz: error: Line 1 of the trace is not JSON.\n"),
])
def test_replay_errors_exit_2_with_one_line(argv, sentence, tmp_path, capsys):
    (tmp_path / "t.jsonl").write_text(GOOD, encoding="utf-8")
    (tmp_path / "bad.jsonl").write_text("nope", encoding="utf-8")
    argv = [{"TRACE": str(tmp_path / "t.jsonl"), "BAD": str(tmp_path / "bad.jsonl")}.get(a, a) for a in argv]
    assert main(argv) == 2
    assert capsys.readouterr().err == sentence


def test_shipped_example_traces_are_real_runs_of_the_bundled_pair():
    paths = sorted(trace.examples_dir().glob("*.jsonl"))
    assert 2 <= len(paths) <= 3
    for path in paths:
        spec, ar = trace.spec_and_ar(trace.read(path))
        assert spec[0].settings["drafter"] == "mtp" and spec[0].settings["draft_tokens"] == 4
        assert spec[-1].type == ar[-1].type == "done"
        assert 48 <= spec[-1].new_tokens <= 64 and spec[-1].drafted > 0
        assert spec[-1].generated_ids == ar[-1].generated_ids   # greedy: lossless


def test_an_older_traces_names_read_as_todays():
    """Draft length and τ have one name each; a trace written before reads through the one
    table (events.RENAMED): draft_len and next_draft_len as draft_tokens and
    next_draft_tokens, and the old mean_accepted_length (over every forward, the prefill
    included) dropped for τ after the prefill, recomputed."""
    old = "\n".join(json.dumps(d) for d in (
        {"type": "start", "mode": "speculative", "prompt_tokens": 3, "prompt_ids": [1, 2, 3], "settings": {}},
        {"type": "step", "step": 1, "draft_len": 0, "accepted": 0, "new_tokens": 1, "next_draft_len": 4},
        {"type": "step", "step": 2, "draft_len": 4, "accepted": 4, "new_tokens": 5, "next_draft_len": 4},
        {"type": "step", "step": 3, "draft_len": 4, "accepted": 1, "new_tokens": 2, "next_draft_len": 4},
        {"type": "done", "new_tokens": 8, "target_forwards": 3, "seconds": 0.1, "mean_accepted_length": 8 / 3}))
    events = trace.loads(old)
    steps = [e for e in events if isinstance(e, Step)]
    assert [(s.draft_tokens, s.next_draft_tokens) for s in steps] == [(0, 4), (4, 4), (4, 4)]
    assert events[-1].tau == pytest.approx((8 - 1) / (3 - 1))
    assert "mean_accepted_length" not in events[-1].to_dict() and "draft_len" not in steps[0].to_dict()
    # an old name out of range is refused by its new name's range
    bad = old.replace('"draft_len": 4, "accepted": 1', '"draft_len": 999, "accepted": 1')
    with pytest.raises(UserError, match="draft_tokens"):
        trace.loads(bad)
