"""How often following the data goes back to a file: the app's Run and Measure handlers and
the bench's run, on the bundled pair, traced as they run (issue 41).

``sys.setprofile`` records the first call of every function of the package (a
comprehension, lambda or inner function read with the function it is in; loops and
second calls add nothing: a reader reads a function once), and counts two things:

- **calls back**: a first call into a file that is already on the stack below its
  caller's file: the data went down from that file and comes back up into it (a
  callback, a mixin reading its host, a record amended through another's runner);
- **reading order**: the first calls in order (a depth-first reading of the path),
  grouped into visits, consecutive functions of one file being one visit; a file read
  in ``v`` visits is gone back to ``v - 1`` times. Counted over the app, ``measure/``
  and the CLI (the engine, sources and views read as the APIs they are: a call into
  them and back is one visit of the caller), and over every layer.

    python benchmarks/reentry.py [--out benchmarks/results/reentry]

Writes ``reentry.json`` (every count, and each path's visits file by file) and prints,
per path, the files gone back to most. The first run of each path is untraced (lazy
imports and warm-up).
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import threading
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = str(ROOT / "mtp_viz") + os.sep
UPPER = ("mtp_viz/app/", "mtp_viz/measure/", "mtp_viz/cli/")


class Reader:
    """The package's functions in the order first called (from every thread), and each
    first call that goes back: into a file already on the stack below its caller's."""

    def __init__(self):
        self.seen: set = set()
        self.order: list[tuple[str, str]] = []          # (file, function), first calls in order
        self.back: list[tuple[str, str, str, str]] = []  # (file, function, caller's file, caller)

    def __call__(self, frame, event, arg):
        code = frame.f_code
        if event != "call" or not code.co_filename.startswith(PACKAGE):
            return
        # a comprehension, lambda or inner function is read with the function it is in
        where = (_rel(code.co_filename), code.co_qualname.split(".<locals>")[0])
        if where in self.seen:
            return
        self.seen.add(where)
        self.order.append(where)
        caller = frame.f_back
        if caller is None or not caller.f_code.co_filename.startswith(PACKAGE) \
                or caller.f_code.co_filename == code.co_filename:
            return
        below, f = set(), caller.f_back
        while f is not None:
            below.add(f.f_code.co_filename)
            f = f.f_back
        if code.co_filename in below:
            self.back.append((*where,
                              _rel(caller.f_code.co_filename), caller.f_code.co_qualname))

    def __enter__(self):
        sys.setprofile(self)
        threading.setprofile(self)
        return self

    def __exit__(self, *exc):
        sys.setprofile(None)
        threading.setprofile(None)


def _rel(path: str) -> str:
    return os.path.relpath(path, ROOT)


def visits(order: list[tuple[str, str]]) -> list[tuple[str, list[str]]]:
    """The path as visits: runs of consecutive first calls in one file."""
    out: list[tuple[str, list[str]]] = []
    for path, name in order:
        if out and out[-1][0] == path:
            out[-1][1].append(name)
        else:
            out.append((path, [name]))
    return out


def revisits(order: list[tuple[str, str]]) -> dict[str, int]:
    """File -> times the reading order comes back to it after leaving it (visits - 1)."""
    n = Counter(path for path, _ in visits(order))
    return {p: v - 1 for p, v in n.most_common() if v > 1}


def app_handlers():
    """The app's Handlers on the bundled pair, loaded (off the trace)."""
    from mtp_viz.app.handlers import local
    from mtp_viz.app.runtime import deploy, loading, service
    from mtp_viz.app.runtime.pairs import PairSpec
    loader = service.PairLoader(loading.load_and_warm)
    h = local.Handlers(loader, deploy.presets(loader.allow), ("tiny", None), cap=64, prompt_cap=512)
    assert loader.wait(PairSpec("tiny"), timeout=300).status == service.Load.READY
    return h


VALUES = dict(prompt="def fib(n):", model="tiny", custom_target="", custom_drafter="", max_new_tokens=16,
              draft_tokens=4, schedule="constant", drafter_kind="mtp", decoding="greedy", temperature=0.8,
              top_p=0.95, top_k=0, seed=0, chat=False, baseline=True)


def trace_run(h) -> Reader:
    list(h.run(dict(VALUES), None))          # the first run's lazy imports and warm-up, off the trace
    with Reader() as r:
        for _ in h.run(dict(VALUES), None):
            pass
    return r


def trace_measure(h) -> Reader:
    list(h.measuring.measure(dict(VALUES), 2, None))
    with Reader() as r:
        for _ in h.measuring.measure(dict(VALUES), 2, None):
            pass
    return r


def trace_bench() -> Reader:
    """``mtp-viz bench --quick`` of 8 tokens; its results go to a folder thrown away."""
    import tempfile

    from mtp_viz.cli.main import main
    with tempfile.TemporaryDirectory() as out:
        argv = ["bench", "--quick", "--max-new-tokens", "8", "--force", "--no-progress", "--out", out]
        main(argv)
        with Reader() as r:
            main(argv)
    return r


def _top(counts: dict[str, int]) -> str:
    return ", ".join(f"{p} {n}" for p, n in list(counts.items())[:5]) or "none"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, default=ROOT / "benchmarks/results/reentry")
    a = p.parse_args(argv)
    a.out.mkdir(parents=True, exist_ok=True)
    import torch
    torch.set_num_threads(1)
    h = app_handlers()
    paths = {"app Run": trace_run(h), "app Measure": trace_measure(h), "bench run": trace_bench()}
    report = {}
    for name, r in paths.items():
        back = dict(Counter(b[0] for b in r.back).most_common())
        upper = [(p, f) for p, f in r.order if p.startswith(UPPER)]
        again, again_all = revisits(upper), revisits(r.order)
        report[name] = {"functions": len(r.order), "calls_back": back, "back": [list(b) for b in r.back],
                        "revisits_upper": again, "visits_upper": [[p, fns] for p, fns in visits(upper)],
                        "revisits_all": again_all, "visits_all": [[p, fns] for p, fns in visits(r.order)]}
        print(f"{name}: {len(r.order)} functions\n  calls back into a file below on the stack: {_top(back)}"
              f"\n  reading order, app/measure/cli, back to a file: {_top(again)}"
              f"\n  reading order, every layer, back to a file: {_top(again_all)}")
    (a.out / "reentry.json").write_text(json.dumps(report, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
