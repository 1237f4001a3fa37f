"""Load test of a real ``python app.py`` through ``gradio_client``: 8, then 16 concurrent
sessions, 3 rounds each, mixed prompts (some bad), some clients that leave mid-stream;
then a soak of sequential runs. Loopback only; every loop is bounded.

    python benchmarks/load_test.py                    # bundled pair, 8 and 16 clients x 3 rounds
    python benchmarks/load_test.py --soak 200

Reports completed runs, errors (expected and not), cross-talk (each greedy output
against its solo run), p50/p95 queue wait (time from submit to the first streamed value
minus the run's own engine time is not separable from the client side, so the wait is
measured as submit → first value), and the server's resident memory before and after.
"""
from __future__ import annotations

import argparse
import os
import random
import socket
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
GOOD = ["def parse(line):\n", "import os\nimport sys\n", "class Config:\n    def __init__(self):\n",
        "for i in range(10):\n", "def main():\n    args = ", "with open(path) as f:\n"]
BAD = [("", "Type a prompt first"), ("x" * 70_000, "too long"),
       ("def f():\n", "finite number")]  # the last one is sent with temperature=nan


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def ids(events) -> list[int]:
    return [e["token_id"] for e in events if e["type"] in ("accepted", "bonus", "token")]


def one(url: str, kind: str, prompt: str, tokens: int, out: list, lock: threading.Lock) -> None:
    from gradio_client import Client
    client = Client(url, verbose=False)
    kw = dict(prompt=prompt, model="", max_new_tokens=tokens, chat=False, api_name="/generate")
    if kind == "bad" and prompt.startswith("def f"):
        kw["temperature"] = float("nan")
    t0 = time.monotonic()
    job = client.submit(**kw)
    first = None
    result = None
    try:
        for value in job:
            if first is None:
                first = time.monotonic() - t0
            if kind == "leave":  # a client that goes away mid-stream
                job.cancel()
                break
            result = value
        if kind != "leave":
            result = job.outputs()[-1] if job.outputs() else result
    except Exception as e:  # noqa: BLE001 - counted, not raised
        result = [{"type": "error", "message": f"client: {type(e).__name__}"}]
    with lock:
        out.append({"kind": kind, "prompt": prompt, "wait": first, "events": result or []})


def wave(url: str, clients: int, tokens: int, rng: random.Random) -> list[dict]:
    out: list[dict] = []
    lock = threading.Lock()
    threads = []
    for i in range(clients):
        r = rng.random()
        if r < 0.2:
            kind, prompt = "bad", rng.choice(BAD)[0]
        elif r < 0.3:
            kind, prompt = "leave", rng.choice(GOOD)
        else:
            kind, prompt = "good", rng.choice(GOOD)
        threads.append(threading.Thread(target=one, args=(url, kind, prompt, tokens, out, lock)))
    for t in threads:
        t.start()
    for t in threads:
        t.join(600)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--clients", default="8,16")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--tokens", type=int, default=32)
    ap.add_argument("--soak", type=int, default=200, help="sequential runs for the memory soak")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    from gradio_client import Client

    port = free_port()
    env = {**os.environ, "GRADIO_SERVER_PORT": str(port), "GRADIO_ANALYTICS_ENABLED": "False",
           "MTP_VIZ_ALLOWED_MODELS": "tiny", "MTP_VIZ_QUEUE_SIZE": "64",
           "NO_PROXY": "127.0.0.1,localhost", "no_proxy": "127.0.0.1,localhost"}
    proc = subprocess.Popen([sys.executable, str(ROOT / "app.py")], env=env, cwd=ROOT,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}/"
    try:
        deadline = time.monotonic() + 180
        while True:
            try:
                client = Client(url, verbose=False)
                break
            except Exception:  # noqa: BLE001 - not up yet
                if time.monotonic() > deadline:
                    raise SystemExit("the app did not come up within 180 s")
                time.sleep(1)
        solo = {p: ids(client.predict(prompt=p, model="", max_new_tokens=args.tokens, chat=False,
                                      api_name="/generate")) for p in GOOD}
        mem0 = rss_mb(proc.pid)
        rng = random.Random(args.seed)
        print(f"server memory after warm-up: {mem0:.0f} MB")
        for clients in (int(c) for c in args.clients.split(",")):
            for r in range(args.rounds):
                t = time.monotonic()
                res = wave(url, clients, args.tokens, rng)
                good = [x for x in res if x["kind"] == "good"]
                done = [x for x in good if x["events"] and x["events"][-1]["type"] == "done"]
                crosstalk = sum(ids(x["events"]) != solo[x["prompt"]] for x in done)
                bad_ok = sum(len(x["events"]) == 1 and x["events"][0]["type"] == "error"
                             for x in res if x["kind"] == "bad")
                waits = sorted(x["wait"] for x in res if x["wait"] is not None)
                p95 = waits[min(len(waits) - 1, int(0.95 * len(waits)))] if waits else float("nan")
                print(f"{clients} clients, round {r + 1}: {len(done)}/{len(good)} good runs completed, "
                      f"{bad_ok}/{sum(x['kind'] == 'bad' for x in res)} bad inputs answered with one "
                      f"error event, {sum(x['kind'] == 'leave' for x in res)} left mid-stream, "
                      f"cross-talk {crosstalk}, first value p50 {statistics.median(waits):.1f} s "
                      f"p95 {p95:.1f} s, wall {time.monotonic() - t:.1f} s, "
                      f"server {rss_mb(proc.pid):.0f} MB")
        mem1 = rss_mb(proc.pid)
        for i in range(args.soak):
            p = GOOD[i % len(GOOD)]
            got = ids(client.predict(prompt=p, model="", max_new_tokens=args.tokens, chat=False,
                                     api_name="/generate"))
            assert got == solo[p], f"soak run {i}: output changed"
        mem2 = rss_mb(proc.pid)
        print(f"soak: {args.soak} sequential runs, memory {mem1:.0f} → {mem2:.0f} MB "
              f"({mem2 - mem1:+.0f} MB; goal < 50 MB); since warm-up {mem2 - mem0:+.0f} MB")
    finally:
        proc.terminate()
        proc.wait(30)
    return 0


if __name__ == "__main__":
    sys.exit(main())
