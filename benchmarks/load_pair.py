"""Loading the bundled pair: ``load_pair("tiny")`` against transformers' own loading of
the same folders (tokenizer, target and drafter with ``AutoTokenizer`` and
``AutoModelForCausalLM``), each in a fresh process, interleaved, medians of repeats.

    python benchmarks/load_pair.py --repeats 7

Reports the loading call alone and the whole process (imports included); the goal is
a ratio of at most 1.3.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys

CHILD = r"""
import json, sys, time
t0 = time.perf_counter()
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer
from mtp_viz.models import load_pair
from mtp_viz.presets import resolve
torch.set_num_threads(1)
t1 = time.perf_counter()
if sys.argv[1] == "mtp-viz":
    load_pair("tiny")
else:
    target, drafter = resolve("tiny")
    AutoTokenizer.from_pretrained(target)
    AutoModelForCausalLM.from_pretrained(target, dtype=torch.float32)
    AutoModelForCausalLM.from_pretrained(drafter, dtype=torch.float32)
t2 = time.perf_counter()
print(json.dumps({"load": t2 - t1, "process": t2 - t0}))
"""


def one(kind: str) -> dict:
    out = subprocess.run([sys.executable, "-c", CHILD, kind], capture_output=True, text=True,
                         check=True, env={**os.environ, "HF_HUB_OFFLINE": "1",
                                          "TRANSFORMERS_VERBOSITY": "error"})
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args()
    runs: dict[str, list[dict]] = {"mtp-viz": [], "transformers": []}
    for i in range(args.repeats):
        order = ["mtp-viz", "transformers"] if i % 2 == 0 else ["transformers", "mtp-viz"]
        for kind in order:
            runs[kind].append(one(kind))
    med = {k: {m: statistics.median(r[m] for r in v) for m in ("load", "process")} for k, v in runs.items()}
    print(f"{'':14} {'load (s)':>9} {'process (s)':>12}   medians of {args.repeats} fresh processes")
    for k, m in med.items():
        print(f"{k:14} {m['load']:9.3f} {m['process']:12.3f}")
    ratio = med["mtp-viz"]["load"] / med["transformers"]["load"]
    ratio_p = med["mtp-viz"]["process"] / med["transformers"]["process"]
    print(f"ratio mtp-viz / transformers: load ×{ratio:.2f}, process ×{ratio_p:.2f} (goal ≤ 1.3)")


if __name__ == "__main__":
    main()
