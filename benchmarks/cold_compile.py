"""A cold compile of the default run and the first generate of new prompts after it
(issue 40, item 4): ``load_pair("tiny", compile=True)`` on an empty inductor cache, each
graph's progress line with the seconds at which it started, then three prompts of lengths
the graphs were not made for, each's first token and whether dynamo built a graph during
it. One torch thread; run alone on a quiet machine:

    .venv/bin/python benchmarks/cold_compile.py --out benchmarks/results/cold-compile
"""
from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from pathlib import Path

PROMPTS = ("x = 1", "def f(a, b):\n    return a + b\n\nprint(f(1, 2))", "import os\nimport sys\n" * 6)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default="benchmarks/results/cold-compile")
    args = ap.parse_args()
    cache = tempfile.mkdtemp(prefix="inductor-cold-")
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = cache   # before torch reads it: nothing cached
    import torch
    from torch._dynamo.utils import counters
    torch.set_num_threads(1)
    from mtp_viz.measure import machine
    from mtp_viz.sources.models import load_pair
    told = []
    t = time.perf_counter()
    pair = load_pair("tiny", compile=True,
                     progress=lambda p: told.append((round(time.perf_counter() - t, 1), p.line())))
    result = {"machine": machine.line(machine.machine()),
              "load_pair_compile_seconds": round(time.perf_counter() - t, 1),
              "compile_seconds": round(pair.compile_seconds, 1), "graphs": told, "first_generates": []}
    for prompt in PROMPTS:
        before = counters["stats"].get("unique_graphs", 0)
        t, first = time.perf_counter(), None
        for e in pair.generate(prompt, max_new_tokens=64, chat=False):
            if first is None and type(e).__name__ in ("Accepted", "Token", "Bonus", "Rejected"):
                first = time.perf_counter() - t
        result["first_generates"].append({
            "prompt_tokens": len(pair.encode(prompt, False)), "first_token_seconds": round(first, 3),
            "seconds": round(time.perf_counter() - t, 3),
            "graphs_built": counters["stats"].get("unique_graphs", 0) - before})
    print(json.dumps(result, indent=1))
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "cold_compile.json").write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
