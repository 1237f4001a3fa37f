"""mtp-viz's own engine against a vLLM server, on the bundled pair and the same prompts.

    python -m benchmarks.engine_vs_vllm --server http://127.0.0.1:8011      # from the repository root
    python -m benchmarks.engine_vs_vllm --baseline-server http://127.0.0.1:8012   # a second pass

Each prompt of the bundled pair's held-out suite (raw text, greedy, 64 new tokens, 4
drafts per step) runs, interleaved: the local engine speculative and autoregressive
(torch pinned to 1 thread, as vLLM's CPU server pins itself), and the server (with
speculation via --server, without via --baseline-server). Reported per source:
acceptance (accepted ÷ drafted), α, τ (tokens per verify step after the prefill),
tokens/s (pooled; the server's through HTTP, client wall time), and whether the greedy
tokens and the per-step (drafted, accepted) sequences agree with the local engine's
(and, where they do not, how many drafts the step before the first difference kept).
Both passes run the local autoregressive baseline, so a speedup can be formed for each.
``--compile`` adds the compiled engine (engine/compiled.py) in both modes, on the same
models, compiled before the timed runs (its compile time printed and written apart).
"""
from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

from mtp_viz.analysis import metrics
from mtp_viz.engine.events import Done, Step
from mtp_viz.paths import assets_dir
from mtp_viz.sources.vllm.stream import events as server_events


def steps_of(evs):
    """(drafted, accepted) per step, the last left out: the engine shortens its last draft
    to the token budget, vLLM does not, so the last steps differ by design."""
    return [(s.draft_tokens, s.accepted) for s in evs if isinstance(s, Step)][:-1]


def divergence(a, b):
    """Accepted count of the step before the first differing step (None: no difference)."""
    k = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), None)
    return None if k is None else a[k - 1][1]


def summary(runs, reference=None):
    evs = [e for r in runs for e in r["events"]]
    s = metrics.summarize(evs)
    tps = [sum(r["tokens"] for r in runs if r["repeat"] == k) / sum(r["seconds"] for r in runs if r["repeat"] == k)
           for k in sorted({r["repeat"] for r in runs})]
    out = {"tokens_per_second": statistics.median(tps), "acceptance_rate": s.acceptance_rate or None,
           "alpha": s.alpha or None, "tau": (s.new_tokens - s.generations) / (s.target_forwards - s.generations)
           if s.drafted else 1.0, "generations": s.generations}
    if reference is not None:
        pairs = [(r, ref) for r in runs for ref in reference
                 if ref["prompt"] == r["prompt"] and ref["repeat"] == r["repeat"]]
        out["same_tokens"] = sum(r["ids"] == ref["ids"] for r, ref in pairs) / len(pairs)
        if s.drafted:
            out["same_steps"] = sum(steps_of(r["events"]) == steps_of(ref["events"]) for r, ref in pairs) / len(pairs)
            out["accepted_before_first_difference"] = sorted(
                d for r, ref in pairs if (d := divergence(steps_of(ref["events"]), steps_of(r["events"]))) is not None)
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--server")
    ap.add_argument("--baseline-server")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--max-new-tokens", type=int, default=64)
    ap.add_argument("--out", default="benchmarks/results/engine-vs-vllm")
    ap.add_argument("--compile", action="store_true", help="also the compiled engine, both modes")
    args = ap.parse_args()
    import torch

    from mtp_viz.sources.models import load_pair
    torch.set_num_threads(1)
    pair = load_pair("tiny")
    prompts = [p["prompt"] for p in json.loads((assets_dir() / "tiny" / "eval_prompts.json").read_text())["prompts"]]
    n = args.max_new_tokens
    modes = {"engine speculative": lambda p: pair.generate(p, max_new_tokens=n, draft_tokens=4, chat=False),
             "engine autoregressive": lambda p: pair.generate(p, mode="autoregressive", max_new_tokens=n, chat=False)}
    compile_seconds = None
    if args.compile:
        fast = pair.on("compiled")   # the same models
        note = fast.compile_note
        assert not note, note
        compile_seconds = fast.compile_seconds
        print(f"compiled in {compile_seconds:.1f} s")
        modes["compiled speculative"] = lambda p: fast.generate(p, max_new_tokens=n, draft_tokens=4, chat=False)
        modes["compiled autoregressive"] = lambda p: fast.generate(p, mode="autoregressive", max_new_tokens=n,
                                                                   chat=False)
    if args.server:
        modes["vLLM speculative"] = lambda p: server_events(args.server, p, max_new_tokens=n)
    if args.baseline_server:
        modes["vLLM without speculation"] = lambda p: server_events(args.baseline_server, p, max_new_tokens=n,
                                                                    mode="autoregressive")
    for f in modes.values():  # warm-up
        list(f(prompts[0]))
    runs = {m: [] for m in modes}
    names = list(modes)
    for r in range(args.repeats):
        for i, p in enumerate(prompts):
            shift = (r * len(prompts) + i) % len(names)
            for m in names[shift:] + names[:shift]:
                t = time.perf_counter()
                evs = list(modes[m](p))
                wall = time.perf_counter() - t
                done = evs[-1]
                assert isinstance(done, Done), done
                runs[m].append({"prompt": i, "repeat": r, "events": evs, "ids": list(done.generated_ids),
                                "tokens": done.new_tokens,
                                # compile_seconds: a graph first compiled in this run (off its time)
                                "seconds": done.seconds if m.startswith("vLLM") else wall - done.compile_seconds})
    ref = runs["engine speculative"]
    result = {m: summary(runs[m], None if m == "engine speculative" else ref) for m in modes}
    ar = result["engine autoregressive"]["tokens_per_second"]
    for row in result.values():
        row["tokens_per_second_over_engine_autoregressive"] = row["tokens_per_second"] / ar
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    tag = ("speculative" if args.server else "baseline") + ("-compiled" if args.compile else "")
    meta = {"prompts": len(prompts), "repeats": args.repeats, "max_new_tokens": n, "draft_tokens": 4,
            "torch_threads": 1, "torch": torch.__version__, "compile_seconds": compile_seconds}
    (out / f"{tag}.json").write_text(json.dumps({"meta": meta, "results": result}, indent=1) + "\n")
    lines = ["| source | tok/s | ÷ engine AR | accept | α | τ | same tokens as engine | same steps |",
             "|---|---|---|---|---|---|---|---|"]
    f = lambda x, fmt="{:.2f}": "–" if x is None else fmt.format(x)  # noqa: E731
    for m, row in result.items():
        lines.append(f"| {m} | {row['tokens_per_second']:.1f} | "
                     f"×{row['tokens_per_second_over_engine_autoregressive']:.2f} | "
                     f"{f(row['acceptance_rate'], '{:.1%}')} | {f(row['alpha'], '{:.3f}')} | {row['tau']:.2f} | "
                     f"{f(row.get('same_tokens'), '{:.0%}')} | {f(row.get('same_steps'), '{:.0%}')} |")
    if "vLLM speculative" in result:
        lines.append(f"\nAccepted drafts in the step before the first differing step, per run: "
                     f"{result['vLLM speculative']['accepted_before_first_difference']}")
    (out / f"{tag}.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
