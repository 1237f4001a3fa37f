"""Which clock should a run in the app be charged on? The app's comparison (both modes
in turns, ``mtp_viz.app.runtime.zerogpu.runs``) in a plain process, each run timed on wall time
and on the worker thread's CPU time, alone and beside a thread that holds Python's
interpreter lock in bursts (as the server does while it builds frames).

    python benchmarks/own_clock.py                       # bundled pair, 7 runs per cell
    python benchmarks/own_clock.py --runs 9 --out benchmarks/results/app/own_clock.md

Reports per cell the median speedup, the max/min spread and the median rates. One torch
thread (the CPU clock is the whole work only then). Run it on a quiet machine.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import threading
import time
from pathlib import Path

from mtp_viz.prompts import code_suite, load_prompts


def busy(stop: threading.Event, burst: float = 0.05, rest: float = 0.05) -> None:
    """Pure-Python work holding the interpreter lock for ``burst`` s, then ``rest`` s idle."""
    data = list(range(20_000))
    while not stop.is_set():
        t = time.perf_counter()
        while time.perf_counter() - t < burst:
            json.dumps(data)
        time.sleep(rest)


def one(pair, prompt: str, kwargs: dict, now, basis: str) -> tuple[float, float, float]:
    """(speedup, speculative tokens/s, autoregressive tokens/s) of one comparison in turns."""
    from mtp_viz.sources.interleave import interleave
    done = {name: e for name, e in interleave(
        {name: (lambda clock, kw=kw: pair.generate(prompt, clock=clock, **kw)) for name, kw in kwargs.items()},
        now=now, basis=basis) if e.type == "done"}
    spec, ar = (done[k].new_tokens / done[k].seconds for k in ("spec", "ar"))
    return spec / ar, spec, ar


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=7)
    ap.add_argument("--prompt-index", type=int, default=0)
    ap.add_argument("--max-new-tokens", type=int, default=64)
    ap.add_argument("--draft-tokens", type=int, default=4)
    ap.add_argument("--out", type=Path, default=None, help="also write the table here (markdown)")
    args = ap.parse_args()
    from mtp_viz.sources import models
    models.set_threads(1)
    pair = models.load_pair("tiny", None)
    prompt = load_prompts(code_suite())[args.prompt_index].text
    common = dict(max_new_tokens=args.max_new_tokens, chat=False)
    kwargs = {"spec": dict(mode="speculative", draft_tokens=args.draft_tokens, **common),
              "ar": dict(mode="autoregressive", **common)}
    clocks = {"wall": time.perf_counter, "cpu": time.thread_time}
    for _ in range(2):  # warm-up, untimed
        one(pair, prompt, kwargs, time.perf_counter, "wall")
    rows = []
    for load in ("none", "busy thread"):
        stop = threading.Event()
        if load != "none":
            threading.Thread(target=busy, args=(stop,), daemon=True).start()
        cells: dict[str, list] = {name: [] for name in clocks}
        for _ in range(args.runs):  # the two clocks alternate, run by run
            for name, now in clocks.items():
                cells[name].append(one(pair, prompt, kwargs, now, name))
        stop.set()
        for name, r in cells.items():
            x = [v[0] for v in r]
            rows.append(f"| {load} | {name} | ×{statistics.median(x):.2f} | {max(x) / min(x):.3f} | "
                        f"{statistics.median(v[1] for v in r):.0f} | {statistics.median(v[2] for v in r):.0f} | "
                        + " ".join(f"{v:.2f}" for v in x) + " |")
            print(rows[-1], flush=True)
    table = ["| beside the run | clock | median speedup | max/min | speculative tokens/s | "
             "autoregressive tokens/s | each run |", "|---|---|---|---|---|---|---|", *rows]
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(
            f"# Wall time or the thread's CPU time\n\n`python benchmarks/own_clock.py --runs {args.runs}` on "
            f"{time.strftime('%Y-%m-%d')}: bundled pair, held-out code prompt {args.prompt_index}, greedy, "
            f"{args.draft_tokens} drafts, {args.max_new_tokens} tokens, 1 torch thread, the two modes in turns; "
            "the clocks alternate run by run.\n\n" + "\n".join(table) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
