"""Traces under load: a large valid trace reads in one pass, nesting is bounded by
MAX_DEPTH whatever the process's recursion limit, and a file over MAX_BYTES is refused
by its size before any of it is read. (The app's own bounds: tests/app/test_app_trace_limits.py.)"""
import json
import os
import subprocess
import sys
import typing

import pytest

from mtp_viz.cli.main import main
from mtp_viz.engine.events import EVENT_TYPES, Accepted, Bonus, Done, Drafted, Rejected, Start, Step, Token
from mtp_viz.errors import UserError
from mtp_viz.sources import trace

DEEP = "Line 1 of the trace nests arrays or objects more than 32 deep, the most this app reads."
LARGE = "The trace is larger than 5 MB, the most this app reads."
STEPS = 3680  # steps of each run of large_run(): a trace just under MAX_BYTES


def nested(depth: int) -> str:
    """A JSON object nested ``depth`` deep: {"a": {"a": ... 1}}."""
    return '{"a": ' * depth + "1" + "}" * depth


def run_lines(settings: str = '{"drafter": "mtp"}') -> str:
    """A small valid speculative run; its start event's settings as the JSON text given."""
    start = '{"type": "start", "mode": "speculative", "prompt_tokens": 2, "settings": ' + settings + "}"
    rest = [Bonus(1, 7, "x", 0.5), Step(1, 0, 0, 1, t=0.01), Done(1, 1, 0.01, "x", generated_ids=(7,))]
    return "\n".join([start] + [json.dumps(e.to_dict()) for e in rest]) + "\n"


def deep_trace() -> str:
    """The start event's settings nested 600 levels deep (the finding's trace)."""
    return run_lines('{"drafter": "mtp", "x": ' + nested(599) + "}")


@pytest.fixture(params=["default", "raised"])
def recursion_limit(request):
    """The process's recursion limit as Python starts it, then as torch.compile leaves it
    (raised): a trace's outcome must not depend on it."""
    before = sys.getrecursionlimit()
    if request.param == "raised":
        sys.setrecursionlimit(100_000)
    yield request.param
    sys.setrecursionlimit(before)


def test_settings_nested_600_deep_are_one_sentence_under_any_recursion_limit(recursion_limit):
    with pytest.raises(UserError) as e:
        trace.loads(deep_trace())
    assert str(e.value) == DEEP


def test_replay_of_a_600_deep_trace_exits_2_with_one_sentence(recursion_limit, tmp_path, capsys):
    path = tmp_path / "deep.jsonl"
    path.write_text(deep_trace(), encoding="utf-8")
    assert main(["replay", str(path), "--speed", "100"]) == 2
    out = capsys.readouterr()
    assert out.err == f"mtp-viz: error: {DEEP}\n" and out.out == ""


@pytest.mark.parametrize("depth, sentence", [
    (30, None),   # the line, its settings, then 30 more: exactly MAX_DEPTH
    (31, DEEP),
    (600, DEEP),
])
def test_the_depth_bound_is_max_depth_counting_the_line_itself(depth, sentence):
    assert getattr(trace, "MAX_DEPTH", None) == 32
    text = run_lines('{"x": ' + nested(depth) + "}")
    if sentence is None:
        assert trace.loads(text)[0].settings["x"]["a"]
    else:
        with pytest.raises(UserError) as e:
            trace.loads(text)
        assert str(e.value) == sentence


# Read in a child process: under a raised recursion limit the old reader's json.loads ran
# 100,000 arrays deep on the C stack and the process died (SIGSEGV); a child keeps that
# from taking pytest along, and says the outcome as its exit status and stderr.
CHILD = """import sys
from mtp_viz.errors import UserError
from mtp_viz.sources import trace
if sys.argv[2] == "raised":
    sys.setrecursionlimit(100_000)
try:
    trace.read(sys.argv[1])
except UserError as e:
    sys.exit(str(e))
"""


def read_in_a_child(path, limit: str) -> tuple[int, str]:
    """(exit status, stderr) of a fresh Python reading the trace at ``path`` under the
    default recursion limit or a raised one (100,000, as torch.compile leaves it)."""
    done = subprocess.run([sys.executable, "-c", CHILD, str(path), limit], capture_output=True, text=True,
                          timeout=120, env={**os.environ, "OMP_NUM_THREADS": "1"})
    return done.returncode, done.stderr


@pytest.mark.parametrize("line, sentence", [
    ("[" * 100_000, "Line 1 of the trace is not JSON."),                               # never closed
    ("[" * 100_000 + "]" * 100_001, "Line 1 of the trace is not JSON."),               # one closer too many
    ("[" * 100_000 + '"' + "]" * 100_000, "Line 1 of the trace is not JSON."),         # closers inside a string
    ("[" * 100_000 + "]" * 100_000, DEEP),                                              # paired, too deep
], ids=["never-closed", "one-closer-too-many", "closers-in-a-string", "paired-too-deep"])  # short ids: pytest
# puts the test's id in the environment (PYTEST_CURRENT_TEST), which a child inherits, and a
# 100,000-character one is past the kernel's limit on one variable
def test_brackets_100_000_deep_are_one_sentence_in_a_process_with_any_recursion_limit(tmp_path, line, sentence):
    path = tmp_path / "brackets.jsonl"
    path.write_text(line + "\n", encoding="utf-8")
    for limit in ("default", "raised"):
        assert read_in_a_child(path, limit) == (1, sentence + "\n"), limit


def test_the_bound_is_on_nesting_never_on_brackets_inside_text():
    """Code is what the app runs on: a token's text full of brackets (and escaped quotes)
    is text, however many, and reads; the same text beside settings nested MAX_DEPTH + 1
    deep is refused for the nesting."""
    code = '[[{"a": [[[' * 20 + '\\"]]' * 30 + "\\"
    events = [Start("speculative", 2, (5, 6), {"drafter": "mtp", "note": "[" * 500}),
              Bonus(1, 7, code, 0.5), Step(1, 0, 0, 1, t=0.01, reason="{" * 100),
              Done(1, 1, 0.01, code, generated_ids=(7,))]
    assert trace.loads(trace.dumps(events)) == events
    deep = json.loads(nested(31))
    events[0] = Start("speculative", 2, (5, 6), {"drafter": "mtp", "note": "]" * 500 + code, "x": deep})
    with pytest.raises(UserError) as e:
        trace.loads(trace.dumps(events))
    assert str(e.value) == DEEP.replace("Line 1", "Line 2")  # line 1: the header


def large_run() -> list:
    """A speculative run and its baseline of every event type the engine records, top
    candidates on some drafts, text with brackets and a server's nested metrics: a few
    kB under MAX_BYTES as a trace."""
    events, t, ids = [Start("speculative", 4, (1, 2, 3, 4), {"drafter": "mtp", "temperature": 0.0,
                                                             "draft_tokens": 4, "max_new_tokens": 100_000,
                                                             "experts": {}})], 0.0, []
    for s in range(1, STEPS + 1):
        top = dict(q_top_ids=(100, 7), q_top=(0.8, 0.1), q_top_text=("[x]", "y")) if s % 4 == 0 else {}
        events += [Drafted(s, i, 100 + i, f"t{i}[", 0.8, **top) for i in range(4)]
        events += [Accepted(s, i, 100 + i, f"t{i}[", 0.9, 0.8) for i in range(2)]
        events += [Rejected(s, 2, 102, "t2", 0.1, 0.8), Bonus(s, 55, "b]", 0.7, index=2, kind="correction")]
        t += 0.01
        events.append(Step(s, 4, 2, 3, 0.002, 0.008, 4, "constant", t=t, agreed=2))
        ids += [100, 101, 55]
    metrics = {"speculative_decoding": {"per_position": ((1, 2), (3, 4)), "drafts": 3}}  # lists kept as tuples
    events.append(Done(len(ids), STEPS, t, "x" * 10, 4 * STEPS, 4 * STEPS, 2 * STEPS, 0.5, 3.0, 300.0, "max_new_tokens",
                       tuple(ids), server_metrics=metrics))
    events.append(Start("autoregressive", 4, (1, 2, 3, 4), {"experts": {}}))
    for s in range(1, STEPS + 1):
        events += [Token(s, 100, "a", 0.9, s * 0.01), Step(s, 0, 0, 1, t=s * 0.01)]
    events.append(Done(STEPS, STEPS, STEPS * 0.01, "x", generated_ids=(100,) * STEPS))
    return events


def test_a_large_valid_trace_reads_whole_resolving_each_event_types_hints_once(monkeypatch):
    """Parsing resolves an event type's field types once, not once per event (it once
    took 24 s of CPU for a 5 MB trace): counted on typing.get_type_hints itself."""
    events = large_run()
    text = trace.dumps(events)
    assert 4_900_000 < len(text.encode()) <= trace.MAX_BYTES and len(events) > 40_000
    calls = []
    real = typing.get_type_hints
    monkeypatch.setattr(typing, "get_type_hints", lambda *a, **kw: calls.append(a[0]) or real(*a, **kw))
    assert trace.loads(text) == events
    assert len(calls) <= len(EVENT_TYPES)


def _bytes_read() -> int:
    """What this process has read so far, in bytes (Linux counts every read: /proc/self/io)."""
    with open("/proc/self/io") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("rchar:"))


@pytest.mark.parametrize("size", [trace.MAX_BYTES + 1, 200_000_000])
def test_a_file_over_max_bytes_is_refused_by_its_size_before_any_of_it_is_read(tmp_path, capsys, size):
    """A file one byte over MAX_BYTES, or 200 MB (sparse: no disk), is refused without
    reading it, counted in the bytes this process read; the CLI says the same sentence,
    exit 2. A file of exactly MAX_BYTES is read."""
    path = tmp_path / "big.jsonl"
    with open(path, "wb") as f:
        f.truncate(size)
    before = _bytes_read()
    with pytest.raises(UserError) as e:
        trace.read(path)
    assert str(e.value) == LARGE
    assert _bytes_read() - before < 100_000
    assert main(["replay", str(path)]) == 2
    assert capsys.readouterr().err == f"mtp-viz: error: {LARGE}\n"
    assert _bytes_read() - before < 200_000

    text = run_lines()
    path.write_bytes(text.encode() + b"\n" * (trace.MAX_BYTES - len(text.encode())))
    assert os.path.getsize(path) == trace.MAX_BYTES
    assert trace.read(path) == trace.loads(text)


def test_a_token_holding_a_unicode_line_separator_reads_back():
    """The reader split lines where Python's str.splitlines does (U+2028, U+2029, U+0085 too),
    so a trace the app wrote of a model that emitted one failed to read back ("not JSON")."""
    from mtp_viz.engine.events import Start, Token
    from mtp_viz.sources import trace
    events = [Start(mode="autoregressive", prompt_tokens=1),
              Token(step=1, token_id=5, text="a\u2028b\u2029c\u0085d", p=0.5, t=0.1)]
    back = trace.loads(trace.dumps(events))
    assert [e for e in back if isinstance(e, Token)][0].text == "a\u2028b\u2029c\u0085d"
