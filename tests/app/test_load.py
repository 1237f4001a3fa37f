"""The load test (``benchmarks/load_test.py``) run for real at small scale: a real
``python app.py`` with the bundled tiny pair, three concurrent clients (a greedy run, a
bad input, a client that leaves mid-stream), a visitor in headless Chromium whose vLLM
run waits on a trickling server beside two greedy clients, a ten-run soak and a flood of
one-off calls; and the bound on the sessions Gradio keeps (``MTP_VIZ_MAX_SESSIONS``). Its
compile check (a visitor's cold compile beside waves of plain clients: 10-13 minutes of
CPU) is left to full runs by hand; CI's one cold compile in the app, with a plain
``/generate`` finishing beside it, is test_compile_browser.py's."""
from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys

import pytest

from locations import ROOT

pytestmark = pytest.mark.slow  # the load test runs a real app with waves of clients: minutes

SCRIPT = ROOT / "benchmarks" / "load_test.py"


def _module():
    spec = importlib.util.spec_from_file_location("load_test", SCRIPT)
    mod = sys.modules["load_test"] = importlib.util.module_from_spec(spec)  # dataclasses look it up
    spec.loader.exec_module(mod)
    return mod


def test_small_load_test_against_the_real_app(tmp_path):
    env = {**os.environ, "GRADIO_ANALYTICS_ENABLED": "False"}
    proc = subprocess.run([sys.executable, str(SCRIPT), "--clients", "3", "--rounds", "1", "--soak", "10",
                           "--flood", "30", "--trickle", "2", "--trickle-repeats", "2", "--max-sessions", "10",
                           "--compile", "0",   # the cold compile beside plain visitors: test_compile_browser.py
                           "--out", str(tmp_path), "--max-seconds", "1500"],
                          env=env, capture_output=True, text=True, timeout=1560)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    r = json.loads((tmp_path / "load_test.json").read_text())
    assert r["passed"] and r["references_distinct"] and not r.get("aborted")
    (w,) = r["waves"]
    assert (w["clients"], w["normal_runs"], w["completed_runs"]) == (3, 1, 1)
    assert (w["bad_inputs"], w["expected_errors"], w["leavers"], w["left_mid_stream"]) == (1, 1, 1, 1)
    assert w["cross_talk"] == w["unexpected"] == 0 and w["problems"] == []
    # waits cover every client, latencies only the finished runs: two different sets, so
    # their medians need not be ordered (a fast-failing bad input lowers only the waits)
    assert w["queue_wait_p50_s"] > 0 and w["latency_p50_s"] > 0
    assert r["leave_check"]["freed"]  # the run behind a leaver waited less than half the leaver's run
    # a remote run waiting on a silent server holds no local run: every client beside it
    # finished while it still waited (queued behind it, they would have finished after it)
    t = r["trickle_check"]
    assert t["held_nothing"] and t["still_waiting"] and t["stopped"] and t["problems"] == []
    assert t["latency_beside_p50_s"] > 0 and t["latency_alone_p50_s"] > 0
    assert "compile_check" not in r
    s = r["soak"]
    assert (s["runs"], s["completed_runs"], s["cross_talk"], s["unexpected"]) == (10, 10, 0, 0)
    assert len(s["rss_mb"]) == 11 and s["rss_mb"][0][1] > 100  # a real server holding a real model
    assert s["growth_mb"] < 50
    f = r["flood"]
    assert (f["calls"], f["bad_inputs"], f["expected_errors"], f["unexpected"], r["max_sessions"]) == \
        (30, 30, 30, 0, 10)
    assert "**Verdict:** PASS" in (tmp_path / "load_test.md").read_text()


def test_the_judge_calls_a_foreign_output_cross_talk_and_wrong_errors_unexpected():
    lt = _module()
    events = [{"type": "start"}, {"type": "token", "token_id": 5}, {"type": "token", "token_id": 6},
              {"type": "done"}]
    refs = {("greedy", 0): [5, 6], ("greedy", 1): [7, 8]}
    assert lt.judge(dict(kind="greedy", label="0"), events, refs) == (True, "", "")
    assert lt.judge(dict(kind="greedy", label="1"), events, refs)[1] == "cross-talk"
    assert lt.judge(dict(kind="greedy", label="0"), events[:2], refs)[1] == "incomplete"
    error = [{"type": "error", "message": "Draft tokens must be a whole number between 1 and 16."}]
    assert lt.judge(dict(kind="greedy", label="0"), error, refs)[1] == "unexpected error"
    assert lt.judge(dict(kind="bad", label="x", sentence="Draft tokens must be"), error, refs)[0]
    assert lt.judge(dict(kind="bad", label="x", sentence="Type a prompt"), error, refs)[1] == \
        "unexpected answer to bad input"
    assert lt.judge(dict(kind="bad", label="x", sentence="Draft tokens"), events, refs)[1] == \
        "unexpected answer to bad input"


def test_one_off_api_calls_cannot_pile_up_sessions(tmp_path, monkeypatch):
    """Every plain HTTP call is a new Gradio session holding a copy of the page's config;
    ``MTP_VIZ_MAX_SESSIONS`` bounds how many the server keeps, and it keeps serving."""
    from factories import save_gemma_pair
    from mtp_viz.app.page import layout as ui
    from serving import serve
    lt = _module()
    monkeypatch.setenv("MTP_VIZ_MAX_SESSIONS", "3")
    target, _ = save_gemma_pair(tmp_path)
    demo = ui.build_demo(target=str(target))
    try:
        url = serve(demo)
        with lt.http_client() as http:
            for i in range(8):
                events = lt.plain_call(http, url, dict(prompt="  "), timeout=60)
                assert events == [{"type": "error", "message": "Type a prompt first, or pick one of the examples."}]
                assert len(demo.state_holder.session_data) == min(i + 1, 3)
            events = lt.plain_call(http, url, dict(prompt="w10 w11 w12", max_new_tokens=4), timeout=120)
        assert events[-1]["type"] == "done" and events[-1]["new_tokens"] == 4
        assert len(demo.state_holder.session_data) == 3
    finally:
        demo.close()
