"""Load test of a real ``python app.py`` through its ``/generate`` API: concurrent waves
of clients, then memory under a soak and a flood of sessions. Loopback only; every wait has a deadline.

    python benchmarks/load_test.py           # 8 then 16 clients x 3 rounds, soak 200, flood 1000
    python benchmarks/load_test.py --clients 3 --rounds 1 --soak 10 --flood 30 --out /tmp/load

The app runs as a subprocess on a free port with the bundled tiny pair and
``MTP_VIZ_THREADS=1``. Every client is a separate user (see ``load_clients.py``):
normal and bad-input clients are ``gradio_client.Client`` sessions; clients that leave
mid-stream use Gradio's plain HTTP API and close the event stream after the first
generated value, as a closed tab does.

A wave's clients follow :data:`PLAN` by index (3 clients: a greedy run, a bad input, a
client that leaves). Checks: each greedy client's tokens equal the solo reference for
*its* prompt (computed once up front, before any concurrency; a mismatch is cross-talk),
each seeded sampled client's tokens equal its solo seeded run, each bad input is answered
with exactly one ``error`` event holding its sentence, and nothing else errs or hangs.
Queue wait is submit → first streamed value; latency is submit → final value.

Then a visitor in headless Chromium points the vLLM source at a server that trickles
keep-alive comments and never a token, and presses Run: waves of greedy clients alone and
beside that waiting run must show the same latency (``--trickle``).

Then a visitor in headless Chromium picks bfloat16 for both models, ticks Compiled
engine and presses Run on a cold inductor cache (the server's own, fresh): waves of
greedy clients alone and while that pair loads and compiles; each wave beside it must end
while it still compiles, and the plain clients' latency p50/p90 is reported both ways
(``--compile``).

Then memory: the soak runs greedy requests one after another from one session; the
flood sends one-off plain HTTP calls, each a new Gradio session (``MTP_VIZ_MAX_SESSIONS``
bounds what those cost). Each must grow the server's resident memory by less than
``--limit-mb`` (50 MB). Writes ``load_test.md`` and ``load_test.json``; exits 1 if any
check fails, 3 if the wall-clock cap (``--max-seconds``) is hit.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
import tempfile
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parent), str(HERE)]  # this checkout's mtp_viz (as app.py uses it), load_clients
from load_clients import ROOT, TOKENS, Server, call, http_client, leave, plain_call, token_ids  # noqa: E402
from mtp_viz.app.runtime.deploy import env_sessions  # noqa: E402 - no torch, no gradio

# code prompts for the bundled code model, each with its own greedy continuation
PROMPTS = ["def parse(line):\n", "import os\nimport sys\n\n", "class Config:\n    def __init__(self):\n",
           "import json\n\ndef load(", "def main():\n    args = ", "def add(a, b):\n    return"]
LEAVE_TOKENS = 512   # a leaving client asks for many: only the disconnect can stop it early
# Bad inputs: (label, request arguments, the sentence the one error event must hold)
BAD = [("empty prompt", dict(prompt="  "), "Type a prompt first"),
       ("too-long prompt", dict(prompt="x " * 40_000), "The prompt is too long"),
       ("draft_tokens=0", dict(draft_tokens=0), "Draft tokens must be"),
       ("temperature=-1", dict(temperature=-1.0), "Temperature must be a finite number"),
       ("unknown model", dict(model="nobody/no-such-model"), "cannot be downloaded"),
       ("unknown mode", dict(mode="sideways"), "Unknown mode")]
PLAN = ("greedy", "bad", "leave", "greedy", "sampled", "greedy", "bad", "greedy")  # kind by client index


@dataclass
class Outcome:
    kind: str                   # greedy | sampled | bad | leave | soak
    label: str                  # the prompt index or the bad input
    ok: bool = False
    problem: str = ""           # "cross-talk", "unexpected error", "hung", ... when not ok
    detail: str = ""
    wait: float | None = None   # submit -> first streamed value, seconds
    latency: float | None = None  # submit -> final value, seconds


def client_spec(index: int, serial: int) -> dict:
    """Client ``index`` of a wave (``serial`` counts clients over the whole test, so the
    prompts and bad inputs rotate): its kind, label and request arguments."""
    kind, p = PLAN[index % len(PLAN)], serial % len(PROMPTS)
    if kind == "bad":
        label, kw, sentence = BAD[serial % len(BAD)]
        return dict(kind=kind, label=label, kw={"prompt": PROMPTS[p], **kw}, sentence=sentence)
    if kind == "leave":
        return dict(kind=kind, label=str(p), kw=dict(prompt=PROMPTS[p], max_new_tokens=LEAVE_TOKENS))
    if kind == "sampled":
        return dict(kind=kind, label=str(p), kw=sampled_kw(p))
    # greedy output is the same whatever the mode and draft length: vary them
    return dict(kind=kind, label=str(p), kw=dict(prompt=PROMPTS[p], draft_tokens=(2, 4, 6)[serial % 3],
                                                 mode=("speculative", "autoregressive")[serial % 5 == 4]))


def sampled_kw(p: int) -> dict:
    return dict(prompt=PROMPTS[p], temperature=0.8, top_p=0.95, top_k=40, seed=1000 + p)


def judge(spec: dict, events: list[dict], refs: dict) -> tuple[bool, str, str]:
    """(ok, problem, detail) for a finished request."""
    errors = [e for e in events if e.get("type") == "error"]
    if spec["kind"] == "bad":
        if len(events) == 1 and errors and spec["sentence"] in errors[0]["message"]:
            return True, "", errors[0]["message"]
        return False, "unexpected answer to bad input", json.dumps(events[:2])[:200]
    if errors:
        return False, "unexpected error", errors[0]["message"]
    if not events or events[-1].get("type") != "done":
        return False, "incomplete", f"{len(events)} events, the last {events[-1:]}"
    if token_ids(events) != refs[ref_key(spec)]:
        return False, "cross-talk", f"tokens differ from the solo run of prompt {spec['label']}"
    return True, "", ""


def ref_key(spec: dict) -> tuple[str, int]:
    return spec["kind"] if spec["kind"] == "sampled" else "greedy", int(spec["label"])


def one_client(url: str, spec: dict, refs: dict, timeout: float, start: threading.Barrier) -> Outcome:
    """One user: connect, wait for the wave's other clients, send, judge the answer."""
    out, client = Outcome(spec["kind"], spec["label"]), None
    try:
        if spec["kind"] != "leave":
            from gradio_client import Client
            client = Client(url, verbose=False)  # fetches the app's config: before the start
    except Exception as e:  # noqa: BLE001 - every failure is counted, none stops the test
        out.problem, out.detail = "client failure", f"{type(e).__name__}: {e}"[:200]
    try:
        start.wait(timeout)
    except threading.BrokenBarrierError:
        pass  # a client failed to connect; the others go anyway
    try:
        if out.problem:
            return out
        if spec["kind"] == "leave":
            with http_client() as http:
                out.wait = leave(http, url, spec["kw"], timeout)
            out.ok = True
        else:
            events, out.wait, out.latency = call(url, spec["kw"], timeout, client)
            out.ok, out.problem, out.detail = judge(spec, events, refs)
    except Exception as e:  # noqa: BLE001
        out.ok, out.problem, out.detail = False, "client failure", f"{type(e).__name__}: {e}"[:200]
    finally:
        if client is not None:
            client.close()
    return out


def wave(url: str, specs: list[dict], refs: dict, timeout: float) -> list[Outcome]:
    """All ``specs`` at once, each on its own thread and client; one that has not
    answered ``timeout`` seconds (plus set-up) later is recorded as hung."""
    results: list[Outcome | None] = [None] * len(specs)
    start = threading.Barrier(len(specs))

    def work(i: int) -> None:
        results[i] = one_client(url, specs[i], refs, timeout, start)

    threads = [threading.Thread(target=work, args=(i,), daemon=True) for i in range(len(specs))]
    for t in threads:
        t.start()
    deadline = time.monotonic() + timeout + 60
    for t in threads:
        t.join(max(0.0, deadline - time.monotonic()))
    return [r or Outcome(s["kind"], s["label"], problem="hung", detail=f"no answer within {timeout:.0f} s")
            for r, s in zip(results, specs)]


def pct(values: list[float], q: float) -> float | None:
    """The q-quantile of ``values`` by nearest rank (the smallest value with at least a
    fraction q of the values at or below it); None when empty."""
    v = sorted(values)
    return v[max(0, math.ceil(q * len(v)) - 1)] if v else None


def summarize(outcomes: list[Outcome]) -> dict:
    waits = [o.wait for o in outcomes if o.wait is not None]
    lat = [o.latency for o in outcomes if o.latency is not None and o.kind in ("greedy", "sampled", "soak")]
    count = lambda **kw: sum(all(getattr(o, k) == v for k, v in kw.items()) for o in outcomes)  # noqa: E731
    return {"clients": len(outcomes),
            "completed_runs": sum(o.ok and o.kind in ("greedy", "sampled", "soak") for o in outcomes),
            "normal_runs": sum(o.kind in ("greedy", "sampled", "soak") for o in outcomes),
            "bad_inputs": count(kind="bad"), "expected_errors": count(kind="bad", ok=True),
            "left_mid_stream": count(kind="leave", ok=True), "leavers": count(kind="leave"),
            "cross_talk": count(problem="cross-talk"),
            "unexpected": sum(not o.ok and o.problem != "cross-talk" for o in outcomes),
            "queue_wait_p50_s": pct(waits, 0.5), "queue_wait_p95_s": pct(waits, 0.95),
            "latency_p50_s": pct(lat, 0.5), "latency_p95_s": pct(lat, 0.95),
            "problems": [asdict(o) for o in outcomes if not o.ok]}


def soak(url: str, runs: int, refs: dict, timeout: float, server: Server) -> dict:
    """``runs`` greedy requests one after another from one client; memory every 10%."""
    from gradio_client import Client
    client = Client(url, verbose=False)
    outcomes, rss = [], [(0, server.rss_mb())]
    try:
        for i in range(runs):
            spec = dict(kind="soak", label=str(i % len(PROMPTS)), kw=dict(prompt=PROMPTS[i % len(PROMPTS)]))
            o = Outcome("soak", spec["label"])
            try:
                events, o.wait, o.latency = call(url, spec["kw"], timeout, client)
                o.ok, o.problem, o.detail = judge({**spec, "kind": "greedy"}, events, refs)
            except Exception as e:  # noqa: BLE001
                o.problem, o.detail = "client failure", f"{type(e).__name__}: {e}"[:200]
            outcomes.append(o)
            if (i + 1) % max(1, runs // 10) == 0 or i + 1 == runs:
                rss.append((i + 1, server.rss_mb()))
    finally:
        client.close()
    return {**summarize(outcomes), "runs": runs, "rss_mb": rss, "growth_mb": rss[-1][1] - rss[0][1]}


def leave_check(url: str, timeout: float) -> dict:
    """Does a client that leaves free the engine? A long run alone; then the same run,
    left after its first value, with a short run right behind it: the short run's queue
    wait must be well under the long run's time (it waits only for the server to notice)."""
    from gradio_client import Client
    long, client = dict(prompt=PROMPTS[0], max_new_tokens=LEAVE_TOKENS), Client(url, verbose=False)
    try:
        alone = call(url, long, timeout, client)[2]
        with http_client() as http:
            leave(http, url, long, timeout)
        wait = call(url, dict(prompt=PROMPTS[1]), timeout, client)[1]
    finally:
        client.close()
    return {"long_run_s": alone, "wait_behind_leaver_s": wait, "freed": wait < alone / 2}


def trickle_check(url: str, refs: dict, clients: int, repeats: int, timeout: float) -> dict:
    """Does a remote run on a silent vLLM server hold the local engine? Waves of
    ``clients`` greedy clients, alone and then while a visitor's vLLM run waits on a
    server that trickles keep-alive comments (``load_clients.Trickler``), alternated
    ``repeats`` times. The run must still be waiting when each wave ends (it held its
    slot throughout: had they queued behind it, as before the fix, it would have ended
    first), every client must finish, and the median latencies alone and beside it are
    reported side by side (a ratio from the same run, not a verdict)."""
    from load_clients import Trickler
    specs = [dict(kind="greedy", label=str(i % len(PROMPTS)), kw=dict(prompt=PROMPTS[i % len(PROMPTS)]))
             for i in range(clients)]
    latencies, problems, waiting, stopped = {"alone": [], "beside": []}, [], [], []
    trickler = Trickler(url)
    try:
        for _ in range(repeats):
            for beside in (False, True):
                if beside:
                    trickler.start()
                outcomes = wave(url, specs, refs, timeout)
                if beside:
                    waiting.append(trickler.waiting())
                    stopped.append("Stopped." in trickler.stop())
                latencies["beside" if beside else "alone"] += [o.latency for o in outcomes if o.latency is not None]
                problems += [asdict(o) for o in outcomes if not o.ok]
    finally:
        trickler.close()
    alone, beside = (statistics.median(v) if v else None for v in latencies.values())  # None: none finished
    finished = alone is not None and beside is not None
    return {"clients": clients, "repeats": repeats, "latency_alone_p50_s": alone, "latency_beside_p50_s": beside,
            "ratio": beside / alone if finished else None, "still_waiting": all(waiting), "stopped": all(stopped),
            "problems": problems, "held_nothing": finished and all(waiting) and not problems}


def compile_check(url: str, refs: dict, clients: int, waves: int, timeout: float, compile_timeout: float) -> dict:
    """Does a visitor's compile hold the plain visitors? Waves of ``clients`` greedy
    /generate clients alone, then while a visitor in headless Chromium waits for a pair
    in other precisions to load and compile on a cold inductor cache (``Compiler``): up to
    ``waves`` waves beside it, as long as it still compiles. Every wave beside it must
    finish while the compile still runs (queued behind it, as before the engine's line,
    they would have finished after it); their latencies, p50 and p90, alone and beside it,
    are reported side by side (a ratio from the same run, not a verdict)."""
    from load_clients import Compiler
    specs = [dict(kind="greedy", label=str(i % len(PROMPTS)), kw=dict(prompt=PROMPTS[i % len(PROMPTS)]))
             for i in range(clients)]
    latencies, problems, compiling = {"alone": [], "beside": []}, [], []
    visitor = Compiler(url)
    try:
        for _ in range(waves):
            outcomes = wave(url, specs, refs, timeout)
            latencies["alone"] += [o.latency for o in outcomes if o.latency is not None]
            problems += [asdict(o) for o in outcomes if not o.ok]
        t0 = time.monotonic()
        visitor.start()
        for _ in range(waves):
            if not visitor.compiling():
                break
            outcomes = wave(url, specs, refs, timeout)
            compiling.append(visitor.compiling())
            latencies["beside"] += [o.latency for o in outcomes if o.latency is not None]
            problems += [asdict(o) for o in outcomes if not o.ok]
        engine = visitor.finish(compile_timeout)
        compile_wait = time.monotonic() - t0
    finally:
        visitor.close()
    alone, beside = latencies["alone"], latencies["beside"]
    return {"clients": clients, "waves_alone": waves, "waves_beside": len(compiling),
            "latency_alone_p50_s": pct(alone, 0.5), "latency_alone_p90_s": pct(alone, 0.9),
            "latency_beside_p50_s": pct(beside, 0.5), "latency_beside_p90_s": pct(beside, 0.9),
            "compile_to_done_s": compile_wait, "engine": engine, "still_compiling": bool(compiling) and all(compiling),
            "problems": problems,
            "held_nothing": bool(compiling) and all(compiling) and not problems and engine == "compiled"}


def flood(url: str, calls: int, timeout: float, server: Server) -> dict:
    """``calls`` cheap requests (bad input, answered before any model work) over the
    plain HTTP API, each a new Gradio session: what many one-off callers cost the
    server in memory. RSS every 10%."""
    outcomes, rss = [], [(0, server.rss_mb())]
    with http_client() as http:
        for i in range(calls):
            label, kw, sentence = BAD[i % 3]  # the cheap ones: empty, too long, draft_tokens=0
            o = Outcome("bad", label)
            try:
                t0 = time.monotonic()
                events = plain_call(http, url, {"prompt": PROMPTS[0], **kw}, timeout)
                o.wait = time.monotonic() - t0
                o.ok, o.problem, o.detail = judge(dict(kind="bad", sentence=sentence), events, {})
            except Exception as e:  # noqa: BLE001
                o.problem, o.detail = "client failure", f"{type(e).__name__}: {e}"[:200]
            outcomes.append(o)
            if (i + 1) % max(1, calls // 10) == 0 or i + 1 == calls:
                rss.append((i + 1, server.rss_mb()))
    return {**summarize(outcomes), "calls": calls, "rss_mb": rss, "growth_mb": rss[-1][1] - rss[0][1]}


def references(url: str, specs: list[dict], timeout: float) -> dict:
    """The solo output for every (greedy or sampled, prompt) the test will send, one
    request at a time before any concurrency."""
    from gradio_client import Client
    keys = sorted({ref_key(s) for s in specs if s["kind"] in ("greedy", "sampled", "soak")})
    client = Client(url, verbose=False)
    try:
        refs = {}
        for kind, p in keys:
            kw = sampled_kw(p) if kind == "sampled" else dict(prompt=PROMPTS[p])
            events = call(url, kw, timeout, client)[0]
            if events[-1].get("type") != "done":
                raise SystemExit(f"the solo run of prompt {p} failed: {events[-1]}")
            refs[kind, p] = token_ids(events)
    finally:
        client.close()
    return refs


def seconds(x: float | None) -> str:
    return "–" if x is None else f"{x:.2f} s"


def report_md(r: dict) -> str:
    lines = ["# Load test of `python app.py` (bundled tiny pair)", "",
             f"{r['date']} · {r['cpus']} CPUs · server `MTP_VIZ_THREADS={r['threads']}`, concurrency 1 · "
             f"load average {r['load_before'][0]:.1f} before, {r['load_after'][0]:.1f} after · "
             f"{TOKENS} new tokens per normal run, {LEAVE_TOKENS} asked by clients that leave", "",
             "| wave | clients | completed | expected errors | left mid-stream | cross-talk | unexpected "
             "| queue wait p50 / p95 | latency p50 / p95 | server RSS after |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for w in r["waves"]:
        lines.append(f"| {w['clients']}×{w['round']} | {w['clients']} | {w['completed_runs']}/{w['normal_runs']} "
                     f"| {w['expected_errors']}/{w['bad_inputs']} | {w['left_mid_stream']}/{w['leavers']} "
                     f"| {w['cross_talk']} | {w['unexpected']} | {seconds(w['queue_wait_p50_s'])} / "
                     f"{seconds(w['queue_wait_p95_s'])} | {seconds(w['latency_p50_s'])} / "
                     f"{seconds(w['latency_p95_s'])} "
                     f"| {w['rss_after_mb']:.0f} MB |")
    s, lc = r.get("soak"), r.get("leave_check")
    lines += ["", f"Server RSS: {r['rss_start_mb']:.0f} MB after the solo references, "
              f"{r.get('rss_after_waves_mb', float('nan')):.0f} MB after the waves."]
    if lc:
        lines += ["", f"**A client that leaves frees the engine:** a {LEAVE_TOKENS}-token run takes "
                  f"{lc['long_run_s']:.2f} s alone; left after its first value, the run queued behind it "
                  f"waited {lc['wait_behind_leaver_s']:.2f} s ({'yes' if lc['freed'] else 'NO'})."]
    tc = r.get("trickle_check")
    if tc:
        lines += ["", f"**A silent vLLM server holds no local run:** {tc['clients']} greedy clients at once, "
                  f"{tc['repeats']} waves each way: latency p50 {seconds(tc['latency_alone_p50_s'])} alone, "
                  f"{seconds(tc['latency_beside_p50_s'])} while a visitor's vLLM run (headless Chromium) waited on "
                  f"a server that trickles keep-alive comments and never a token "
                  f"({'–' if tc['ratio'] is None else format(tc['ratio'], '.2f')}x); that run "
                  f"still waiting at the end of every wave: {'yes' if tc['still_waiting'] else 'NO'}; Stop ended it: "
                  f"{'yes' if tc['stopped'] else 'NO'} ({'PASS' if tc['held_nothing'] else 'FAIL'})."]
    cc = r.get("compile_check")
    if cc:
        lines += ["", f"**A compile holds no plain visitor:** {cc['clients']} greedy clients at once, latency "
                  f"p50 / p90 {seconds(cc['latency_alone_p50_s'])} / {seconds(cc['latency_alone_p90_s'])} alone "
                  f"({cc['waves_alone']} waves), {seconds(cc['latency_beside_p50_s'])} / "
                  f"{seconds(cc['latency_beside_p90_s'])} while a visitor (headless Chromium) waited for a "
                  f"bfloat16 pair to load and compile on a cold inductor cache ({cc['waves_beside']} waves); "
                  f"the compile still running at the end of every wave: {'yes' if cc['still_compiling'] else 'NO'}; "
                  f"that visitor's run done {cc['compile_to_done_s']:.0f} s after Run, on the "
                  f"{cc['engine'] or '?'} engine ({'PASS' if cc['held_nothing'] else 'FAIL'})."]
    if s:
        lines += ["", f"**Soak:** {s['runs']} sequential greedy runs, {s['completed_runs']} completed, "
                  f"cross-talk {s['cross_talk']}, unexpected {s['unexpected']}; server RSS "
                  f"{s['rss_mb'][0][1]:.0f} → {s['rss_mb'][-1][1]:.0f} MB (**{s['growth_mb']:+.1f} MB**, "
                  f"goal < {r['limit_mb']:.0f} MB); latency p50 {seconds(s['latency_p50_s'])}.",
                  "", "RSS during the soak (runs: MB): " + ", ".join(f"{n}: {m:.0f}" for n, m in s["rss_mb"])]
    fl = r.get("flood")
    if fl:
        lines += ["", f"**Flood:** {fl['calls']} one-off calls over the plain HTTP API, each a new Gradio session "
                  f"(bad input, answered before any model work; sessions kept: `MTP_VIZ_MAX_SESSIONS` = "
                  f"{r['max_sessions']}), {fl['expected_errors']} answered with their one error event, unexpected "
                  f"{fl['unexpected']}; server RSS {fl['rss_mb'][0][1]:.0f} → {fl['rss_mb'][-1][1]:.0f} MB "
                  f"(**{fl['growth_mb']:+.1f} MB**, goal < {r['limit_mb']:.0f} MB).",
                  "", "RSS during the flood (calls: MB): " + ", ".join(f"{n}: {m:.0f}" for n, m in fl["rss_mb"])]
    lines += ["", f"**Verdict:** {'PASS' if r['passed'] else 'FAIL'}"
              + (f" ({r['aborted']})" if r.get("aborted") else "")]
    problems = [p for w in [*r["waves"], tc or {}, cc or {}, s or {}, fl or {}] for p in w.get("problems", [])]
    if problems:
        lines += ["", "Problems:", ""] + [f"- {p['kind']} {p['label']}: {p['problem']}: {p['detail']}"
                                          for p in problems[:30]]
    return "\n".join(lines) + "\n"


def write(out: Path, r: dict) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / "load_test.json").write_text(json.dumps(r, indent=1) + "\n")
    (out / "load_test.md").write_text(report_md(r))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--clients", default="8,16", help="concurrent clients per wave, comma-separated")
    ap.add_argument("--rounds", type=int, default=3, help="waves of each size")
    ap.add_argument("--soak", type=int, default=200, help="sequential runs for the memory soak (0: none)")
    ap.add_argument("--flood", type=int, default=1000,
                    help="one-off plain HTTP calls (each a new session) for the session-memory check (0: none)")
    ap.add_argument("--trickle", type=int, default=3,
                    help="greedy clients per wave of the silent-vLLM check, in headless Chromium (0: none)")
    ap.add_argument("--trickle-repeats", type=int, default=3, help="waves alone and beside it, each")
    ap.add_argument("--compile", type=int, default=3,
                    help="greedy clients per wave of the compile check, beside a visitor compiling in headless "
                         "Chromium on a cold inductor cache (0: none)")
    ap.add_argument("--compile-waves", type=int, default=3, help="waves alone, and at most as many beside it")
    ap.add_argument("--max-sessions", type=int, help="the server's MTP_VIZ_MAX_SESSIONS (default: the app's)")
    ap.add_argument("--limit-mb", type=float, default=50.0, help="most server RSS growth the soak or flood may show")
    ap.add_argument("--client-timeout", type=float, default=300.0, help="seconds one request may take")
    ap.add_argument("--compile-timeout", type=float, default=900.0,
                    help="seconds the compiling visitor may wait for its run (a cold compile of the bundled pair: "
                         "4-10 minutes on 2 cores)")
    ap.add_argument("--max-seconds", type=float, default=3600.0, help="wall-clock cap for the whole test")
    ap.add_argument("--threads", type=int, default=1, help="the server's MTP_VIZ_THREADS")
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "load")
    args = ap.parse_args(argv)
    sizes = [int(c) for c in args.clients.split(",") if c.strip()]
    r: dict = {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "cpus": os.cpu_count(),
               "threads": args.threads, "load_before": os.getloadavg(), "waves": [], "passed": False,
               "args": {k: str(v) for k, v in vars(args).items()},
               "max_sessions": args.max_sessions or env_sessions(), "limit_mb": args.limit_mb}
    cache = tempfile.TemporaryDirectory(prefix="mtp-viz-inductor-")   # the compile check's cold cache
    server = Server(args.threads, {"TORCHINDUCTOR_CACHE_DIR": cache.name,
                                   **({"MTP_VIZ_MAX_SESSIONS": str(args.max_sessions)} if args.max_sessions else {})})

    def cap() -> None:  # the wall-clock cap: record what there is, stop everything
        r.update(aborted=f"wall-clock cap of {args.max_seconds:.0f} s reached", load_after=os.getloadavg())
        r.setdefault("rss_start_mb", float("nan"))
        write(args.out, r)
        print(f"load test: {r['aborted']}; partial results in {args.out}", file=sys.stderr, flush=True)
        server.proc.kill()
        os._exit(3)

    watchdog = threading.Timer(args.max_seconds, cap)
    watchdog.daemon = True
    watchdog.start()
    try:
        server.wait_ready(300)
        serial, plans = 0, []
        for n in sizes:
            for rnd in range(args.rounds):
                plans.append((n, rnd + 1, [client_spec(i, serial + i) for i in range(n)]))
                serial += n
        alone = [dict(kind="greedy", label=str(i % len(PROMPTS)))   # the soak's, the trickle and compile checks'
                 for i in range(min(max(args.soak, args.trickle, args.compile), len(PROMPTS)))]
        refs = references(server.url, [s for _, _, specs in plans for s in specs] + alone,
                          args.client_timeout)
        greedy = [tuple(v) for (k, _), v in refs.items() if k == "greedy"]
        r["references_distinct"] = len(set(greedy)) == len(greedy)  # else cross-talk could hide
        r["rss_start_mb"] = server.rss_mb()
        print(f"server ready; {len(refs)} solo references; RSS {r['rss_start_mb']:.0f} MB", flush=True)
        for n, rnd, specs in plans:
            w = {**summarize(wave(server.url, specs, refs, args.client_timeout)), "round": rnd,
                 "rss_after_mb": server.rss_mb()}
            r["waves"].append(w)
            print(f"{n} clients, round {rnd}: completed {w['completed_runs']}/{w['normal_runs']}, expected "
                  f"errors {w['expected_errors']}/{w['bad_inputs']}, left {w['left_mid_stream']}/{w['leavers']}, "
                  f"cross-talk {w['cross_talk']}, unexpected {w['unexpected']}, queue wait p50/p95 "
                  f"{seconds(w['queue_wait_p50_s'])} / {seconds(w['queue_wait_p95_s'])}, "
                  f"RSS {w['rss_after_mb']:.0f} MB", flush=True)
        r["rss_after_waves_mb"] = server.rss_mb()
        r["leave_check"] = leave_check(server.url, args.client_timeout)
        if args.trickle:
            r["trickle_check"] = tc = trickle_check(server.url, refs, args.trickle, args.trickle_repeats,
                                                    args.client_timeout)
            print(f"trickle: p50 latency {seconds(tc['latency_alone_p50_s'])} alone, "
                  f"{seconds(tc['latency_beside_p50_s'])} beside a silent vLLM run", flush=True)
        if args.compile:
            r["compile_check"] = cc = compile_check(server.url, refs, args.compile, args.compile_waves,
                                                    args.client_timeout, args.compile_timeout)
            print(f"compile: plain latency p50/p90 {seconds(cc['latency_alone_p50_s'])} / "
                  f"{seconds(cc['latency_alone_p90_s'])} alone, {seconds(cc['latency_beside_p50_s'])} / "
                  f"{seconds(cc['latency_beside_p90_s'])} beside a cold compile", flush=True)
        if args.soak:
            r["soak"] = soak(server.url, args.soak, refs, args.client_timeout, server)
            print(f"soak: {args.soak} runs, RSS growth {r['soak']['growth_mb']:+.1f} MB", flush=True)
        if args.flood:
            r["flood"] = flood(server.url, args.flood, args.client_timeout, server)
            print(f"flood: {args.flood} one-off calls, RSS growth {r['flood']['growth_mb']:+.1f} MB", flush=True)
    finally:
        watchdog.cancel()
        server.stop()
        cache.cleanup()
    r["load_after"] = os.getloadavg()
    parts = r["waves"] + [r[k] for k in ("soak", "flood") if k in r]
    r["passed"] = (r["references_distinct"] and all(
        p["completed_runs"] == p["normal_runs"] and p["expected_errors"] == p["bad_inputs"]
        and p["left_mid_stream"] == p["leavers"] and not p["cross_talk"] and not p["unexpected"] for p in parts)
        and r["leave_check"]["freed"] and r.get("trickle_check", {"held_nothing": True})["held_nothing"]
        and r.get("compile_check", {"held_nothing": True})["held_nothing"]
        and all(r[k]["growth_mb"] < args.limit_mb for k in ("soak", "flood") if k in r))
    write(args.out, r)
    print(report_md(r))
    return 0 if r["passed"] else 1


if __name__ == "__main__":
    code = main()
    sys.stdout.flush()
    os._exit(code)  # a hung client's threads must not keep the process alive
