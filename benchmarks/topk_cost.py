"""What recording the token inspector's top candidates costs: ``top=5`` against off.

The app asks the engine for the top 5 candidates at every position (``top=5``); the
benchmarks never do. This script runs the same generations both ways, interleaved and
alternating which goes first, one torch thread, and reports per mode the median over
repeats of tokens/s with top=5 divided by tokens/s without (1.0 = free), both per
wall-clock second and per CPU second of this process (``time.process_time``: on a
shared machine the wall clock also counts other processes' turns, the CPU time far
less), and the ratio of the best runs per CPU second (the least disturbed ones).
Greedy outputs are checked to be identical both ways. Results: benchmarks/results/topk_cost.{json,md}.

    python benchmarks/topk_cost.py                  # the bundled tiny pair
    python benchmarks/topk_cost.py --target T --drafter D --repeats 7
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

from mtp_viz.prompts import load_prompts
from mtp_viz.sources.models import load_pair, set_threads

ROOT = Path(__file__).resolve().parent.parent

MODES = {  # name -> generate() settings
    "speculative greedy": dict(mode="speculative", temperature=0.0),
    "speculative sampling": dict(mode="speculative", temperature=0.8, seed=1),
    "autoregressive greedy": dict(mode="autoregressive", temperature=0.0),
}


def done(pair, prompt: str, top: int, settings: dict, tokens: int):
    """The run's ``done`` event and its tokens per CPU second."""
    cpu = time.process_time()
    events = list(pair.generate(prompt, max_new_tokens=tokens, draft_tokens=4, schedule="constant",
                                chat=False, top=top, **settings))
    return events[-1], events[-1].new_tokens / (time.process_time() - cpu)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--target", default="tiny")
    ap.add_argument("--drafter")
    ap.add_argument("--prompts", default=str(ROOT / "mtp_viz/assets/tiny/eval_prompts.json"))
    ap.add_argument("--n-prompts", type=int, default=3)
    ap.add_argument("--repeats", type=int, default=4)
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--out", default=str(ROOT / "benchmarks/results/topk_cost"))
    args = ap.parse_args(argv)
    set_threads(args.threads)
    pair = load_pair(args.target, args.drafter)
    prompts = load_prompts(args.prompts, default_category="code")[:args.n_prompts]
    pair.warm_up()
    rows = []
    for name, settings in MODES.items():
        ratios, cpu_ratios, tps, cpu = [], [], {0: [], 5: []}, {0: [], 5: []}
        for p in prompts:
            for r in range(args.repeats):
                order = (0, 5) if r % 2 == 0 else (5, 0)
                runs = {top: done(pair, p.text, top, settings, args.tokens) for top in order}
                (off, off_cpu), (on, on_cpu) = runs[0], runs[5]
                if settings["temperature"] == 0.0:
                    assert off.generated_ids == on.generated_ids, "top=5 changed a greedy output"
                tps[0].append(off.tokens_per_second)
                tps[5].append(on.tokens_per_second)
                ratios.append(on.tokens_per_second / off.tokens_per_second)
                cpu_ratios.append(on_cpu / off_cpu)
                cpu[0].append(off_cpu)
                cpu[5].append(on_cpu)
        rows.append({"mode": name, "runs_each": len(ratios), "tps_off": statistics.median(tps[0]),
                     "tps_top5": statistics.median(tps[5]), "ratio_median": statistics.median(ratios),
                     "ratio_min": min(ratios), "ratio_max": max(ratios),
                     "cpu_ratio_median": statistics.median(cpu_ratios), "cpu_ratio_min": min(cpu_ratios),
                     "cpu_ratio_max": max(cpu_ratios), "cpu_best_ratio": max(cpu[5]) / max(cpu[0])})
        print(f"{name}: top=5 at ×{rows[-1]['ratio_median']:.3f} the speed of off "
              f"({rows[-1]['tps_top5']:.1f} vs {rows[-1]['tps_off']:.1f} tokens/s; "
              f"range ×{min(ratios):.3f}–×{max(ratios):.3f}); per CPU second "
              f"×{rows[-1]['cpu_ratio_median']:.3f} (range ×{min(cpu_ratios):.3f}–×{max(cpu_ratios):.3f}), "
              f"best run ÷ best run ×{rows[-1]['cpu_best_ratio']:.3f}",
              flush=True)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    meta = {"target": args.target, "drafter": args.drafter, "threads": args.threads, "tokens": args.tokens,
            "prompts": [p.id for p in prompts], "repeats": args.repeats}
    out.with_suffix(".json").write_text(json.dumps({"meta": meta, "rows": rows}, indent=1) + "\n")
    lines = ["| mode | tokens/s off | tokens/s top=5 | top=5 ÷ off, wall (median, range) | "
             "top=5 ÷ off, CPU time (median, range) | best ÷ best, CPU time |", "|---|---|---|---|---|---|"]
    lines += [f"| {r['mode']} | {r['tps_off']:.1f} | {r['tps_top5']:.1f} | ×{r['ratio_median']:.3f} "
              f"(×{r['ratio_min']:.3f}–×{r['ratio_max']:.3f}) | ×{r['cpu_ratio_median']:.3f} "
              f"(×{r['cpu_ratio_min']:.3f}–×{r['cpu_ratio_max']:.3f}) | ×{r['cpu_best_ratio']:.3f} |" for r in rows]
    out.with_suffix(".md").write_text("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
