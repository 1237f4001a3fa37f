"""The app's bounds on traces (a visitor's upload): at most MAX_PARSES parses at once,
the others wait, then get one sentence; a file over the upload limit (the reader's
MAX_BYTES) is refused by its size, unread and without a parse slot; a trace nested too
deep is a visible sentence, whatever the recursion limit. And Gradio, given the limit
as ``max_file_size``, refuses a larger upload as it arrives.

Handlers are called directly (as test_app.py does): no model is loaded; the parses are
counted by wrapping the real reader (trace.loads), never replaced."""
from __future__ import annotations

import json
import sys
import threading

import pytest

from mtp_viz.app.handlers import local, recorded
from mtp_viz.app.runtime import service
from mtp_viz.engine.events import Bonus, Done, Start, Step
from mtp_viz.errors import UserError
from mtp_viz.sources import trace
from mtp_viz.views import tokens

STATUS = local.OUTPUTS.index("status")
DEEP = "Line 1 of the trace nests arrays or objects more than 32 deep, the most this app reads."
WAIT = 30  # seconds any wait of these tests gives up after: only a failing test waits that long


def _no_model(target, drafter):
    raise UserError("This test app loads no model.")


def _handlers() -> local.Handlers:
    return local.Handlers(service.PairLoader(_no_model), {}, ("tiny", None), 16, 64, empty_figures={})


def _statuses(frames) -> list[str]:
    return [f[STATUS] for f in frames if isinstance(f[STATUS], str)]


def _trace(tmp_path, name="t.jsonl", settings=None) -> str:
    events = [Start("speculative", 2, (5, 6), settings or {"drafter": "mtp"}), Bonus(1, 7, "x", 0.5),
              Step(1, 0, 0, 1, t=0.01), Done(1, 1, 0.01, "x", generated_ids=(7,))]
    path = tmp_path / name
    trace.write(path, events)
    return str(path)


def _bytes_read() -> int:
    """What this process has read so far, in bytes (Linux counts every read)."""
    with open("/proc/self/io") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("rchar:"))


@pytest.fixture
def slots():
    """Both parse slots, held by the test until it lets them go (then released)."""
    held = [recorded.PARSES.acquire(blocking=False) for _ in range(recorded.MAX_PARSES)]
    assert all(held), "a parse slot was left taken"
    yield
    for _ in held:
        recorded.PARSES.release()


def test_the_upload_limit_is_the_readers_max_bytes():
    assert recorded.MAX_UPLOAD_BYTES == trace.MAX_BYTES == recorded.Traces.MAX_UPLOAD_BYTES
    assert recorded.MAX_PARSES == 2


def test_an_oversize_upload_is_refused_by_its_size_unread_and_without_a_parse_slot(tmp_path, slots):
    """A 200 MB upload (sparse: no disk) while both parse slots are taken: the sentence
    comes at once, and the process read none of it."""
    path = tmp_path / "big.jsonl"
    with open(path, "wb") as f:
        f.truncate(200_000_000)
    h = _handlers()
    before = _bytes_read()
    frames = list(h.traces.replay_trace(str(path), None, 100.0))
    assert _bytes_read() - before < 100_000
    assert _statuses(frames) == [tokens.message_html(trace.too_large(), level="error")]
    assert str(tmp_path) not in frames[0][STATUS]


@pytest.mark.parametrize("limit", [None, 100_000])
def test_a_trace_nested_600_deep_is_a_visible_sentence_under_any_recursion_limit(tmp_path, limit):
    path = tmp_path / "deep.jsonl"
    deep = '{"a": ' * 599 + "1" + "}" * 599
    lines = open(_trace(tmp_path), encoding="utf-8").read().splitlines()
    start = json.loads(lines[1])
    lines[1] = json.dumps(start)[:-2] + ', "x": ' + deep + "}}"   # into the start event's settings
    path.write_text("\n".join(lines[1:]) + "\n", encoding="utf-8")
    before = sys.getrecursionlimit()
    try:
        if limit:
            sys.setrecursionlimit(limit)
        frames = list(_handlers().traces.replay_trace(str(path), None, 100.0))
    finally:
        sys.setrecursionlimit(before)
    assert _statuses(frames) == [tokens.message_html(DEEP, level="error")]


def test_a_visitor_past_the_parse_slots_sees_it_wait_then_one_sentence(tmp_path, slots, monkeypatch):
    monkeypatch.setattr(recorded, "PARSE_WAIT", 0.0)
    frames = list(_handlers().traces.replay_trace(_trace(tmp_path), None, 100.0))
    assert _statuses(frames) == [tokens.message_html(recorded.WAITING),
                                 tokens.message_html(recorded.BUSY, level="error")]


def test_four_visitors_at_once_parse_two_at_a_time_and_all_replay(tmp_path, monkeypatch):
    """Four replays at once: the first two parses are held inside the reader until the
    other two have said that they wait; then all four replay, never more than two parses
    at once."""
    real = trace.loads
    lock = threading.Condition()
    gate = threading.Event()
    seen = {"inside": 0, "most": 0, "waiting": 0}

    def counted(data):
        with lock:
            seen["inside"] += 1
            seen["most"] = max(seen["most"], seen["inside"])
            lock.notify_all()
        try:
            assert gate.wait(WAIT)
            return real(data)
        finally:
            with lock:
                seen["inside"] -= 1
    monkeypatch.setattr(trace, "loads", counted)
    h, path, results = _handlers(), _trace(tmp_path), {}

    def visitor(i):
        statuses = []
        for frame in h.traces.replay_trace(path, None, 100.0):
            said = _statuses([frame])
            statuses += said
            if said == [tokens.message_html(recorded.WAITING)]:
                with lock:
                    seen["waiting"] += 1
                    lock.notify_all()
        results[i] = statuses

    threads = [threading.Thread(target=visitor, args=(i,), daemon=True) for i in range(4)]
    for t in threads:
        t.start()
    try:
        with lock:  # each visitor either parses (held at the gate) or says it waits
            settled = lock.wait_for(lambda: seen["inside"] + seen["waiting"] == 4, WAIT)
            at_once = dict(seen)
    finally:
        gate.set()
        for t in threads:
            t.join(WAIT)
    assert settled and at_once == {"inside": 2, "most": 2, "waiting": 2}
    assert seen["most"] == 2 and len(results) == 4
    assert all("Replay done" in s[-1] for s in results.values())
    assert sorted(s[0] == tokens.message_html(recorded.WAITING) for s in results.values()) == [0, 0, 1, 1]
    assert _all_slots_free()


def _all_slots_free() -> bool:
    taken = [recorded.PARSES.acquire(blocking=False) for _ in range(recorded.MAX_PARSES)]
    for ok in taken:
        if ok:
            recorded.PARSES.release()
    return all(taken)


def test_gradio_given_the_limit_refuses_a_larger_upload_as_it_arrives(tmp_path):
    """What the page's launch passes as ``max_file_size``: Gradio answers 413 to an upload
    one byte over, and takes one of exactly the limit."""
    import socket

    import httpx

    import serving  # noqa: F401 (its import lets loopback requests bypass any proxy)
    from mtp_viz.app.page import layout as ui
    demo = ui.build_demo(loader=service.PairLoader(_no_model), target="tiny")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ui.launch(demo, host="127.0.0.1", port=port, prevent_thread_lock=True, quiet=True, share=False,
              ssr_mode=False, max_file_size=recorded.Traces.MAX_UPLOAD_BYTES)
    try:
        url = f"http://127.0.0.1:{port}/gradio_api/upload"
        limit = recorded.MAX_UPLOAD_BYTES
        over = httpx.post(url, files={"files": ("t.jsonl", b" " * (limit + 1))}, timeout=WAIT)
        at = httpx.post(url, files={"files": ("t.jsonl", b" " * limit)}, timeout=WAIT)
    finally:
        demo.close()
    assert over.status_code == 413 and at.status_code == 200
