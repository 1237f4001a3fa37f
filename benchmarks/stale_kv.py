"""Experiment: does the drafter accept more with or without transformers' stale KV entries?

After a rejection, transformers 5.24 (``SinglePositionMultiTokenCandidateGenerator``)
crops the target's shared KV to ``[:current_length]``, the length of the verified
sequence. For the full-attention layers that keeps one entry computed from the first
*rejected* draft (the position the correction token now holds). For the sliding-window
layers, whose KV is shorter than the sequence, the crop does nothing, so the drafter
also sees the entries of *every* rejected draft there. Three variants are compared:

- ``cropped``: our engine's default (``stale_kv=False``): only verified entries;
- ``stale``: our engine's ``stale_kv=True``: one stale entry, in every layer type;
- ``transformers``: exactly what transformers 5.24 hands the drafter (``stale_kv=True``
  plus transformers' crop of the sliding-window KV, patched in for this script only).

Greedy decoding gives the same tokens in every variant (the target decides every
token), so the comparison is exact and needs no timing: per prompt and draft length
we count accepted drafts, rejections and target forwards. The ``transformers`` variant
is checked against transformers' own assisted decoding: same drafts, so the same
number of target forwards. Results: benchmarks/results/stale_kv.{json,md}.

    python benchmarks/stale_kv.py                         # the bundled tiny pair
    python benchmarks/stale_kv.py --target T --drafter D  # any Gemma 4 pair
"""
from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import random
import sys
import time
from pathlib import Path

from mtp_viz.analysis import metrics
from mtp_viz.engine import loop as engine
from mtp_viz.measure.records import Setting
from mtp_viz.measure.runner import Runner
from mtp_viz.prompts import load_prompts
from mtp_viz.sources.settings import RunSettings

ROOT = Path(__file__).resolve().parent.parent

VARIANTS = ("cropped", "stale", "transformers")


def transformers_crop(shared_kv: dict, drop: int) -> dict:
    """transformers 5.24: cut every layer type to the verified length (``[:current_length]``),
    which leaves a sliding-window KV shorter than that untouched."""
    n = shared_kv["full_attention"][0].shape[-2] - drop
    return {t: (k[:, :, :n], v[:, :, :n]) for t, (k, v) in shared_kv.items()}


@contextlib.contextmanager
def variant(name: str):
    saved = engine.crop_shared_kv
    if name == "transformers":
        engine.crop_shared_kv = transformers_crop
    try:
        yield
    finally:
        engine.crop_shared_kv = saved


def paired_bootstrap(diffs: list[float], n: int = 4000, seed: int = 0) -> tuple[float, float]:
    """95% interval of the mean of per-prompt differences, resampling prompts."""
    rng = random.Random(seed)
    means = sorted(sum(rng.choice(diffs) for _ in diffs) / len(diffs) for _ in range(n))
    return means[int(0.025 * n)], means[int(0.975 * n) - 1]


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--target", default="tiny")
    p.add_argument("--drafter", default=None)
    p.add_argument("--prompts", default=None, help="prompt suite (default assets/prompts.json)")
    p.add_argument("--extra-prompts", default=None,
                   help="a second prompt file, e.g. the tiny pair's held-out code prompts")
    p.add_argument("--draft-tokens", default="2,4,8")
    p.add_argument("--max-new-tokens", type=int, default=64)
    p.add_argument("--no-chat", action="store_true")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--out", default=str(ROOT / "benchmarks" / "results"))
    args = p.parse_args(argv)

    import torch

    from mtp_viz.engine.sampling import Sampling
    from mtp_viz.sources.models import load_pair
    torch.set_num_threads(args.threads)
    pair = load_pair(args.target, args.drafter)
    prompts = load_prompts(args.prompts)
    if args.extra_prompts:
        # e.g. mtp_viz/assets/tiny/eval_prompts.json: held-out stdlib code
        extra = load_prompts(args.extra_prompts, default_category="held-out code")
        prompts += [dataclasses.replace(q, id="heldout-" + q.id) for q in extra]
    gammas = [int(x) for x in args.draft_tokens.split(",")]
    runners = {v: Runner(pair, RunSettings("", drafter="mtp", max_new_tokens=args.max_new_tokens,
                                           sampling=Sampling(), chat=not args.no_chat, stale_kv=v != "cropped"))
               for v in VARIANTS}
    rows, per_prompt = [], []
    t0 = time.perf_counter()
    for g in gammas:
        setting = Setting("constant", g)
        ev = {v: [] for v in VARIANTS}
        diffs = {v: [] for v in VARIANTS[1:]}
        same_tokens, ref_match = True, 0
        for q in prompts:
            out = {}
            for v, runner in runners.items():
                with variant(v):
                    out[v] = runner.run("speculative", q.text, setting)
                ev[v].extend(out[v][1])
            ref, _ = runners["cropped"].run("reference", q.text, setting)
            same_tokens &= all(out[v][0].ids == ref.ids for v in VARIANTS)
            ref_match += out["transformers"][0].target_forwards == ref.target_forwards
            tau = {v: metrics.tau(out[v][1]) for v in VARIANTS}
            for v in diffs:
                diffs[v].append(tau["cropped"] - tau[v])
            per_prompt.append({"draft_tokens": g, "prompt_id": q.id, "category": q.category,
                               **{f"alpha_{v}": metrics.alpha_estimate(out[v][1]) for v in VARIANTS},
                               **{f"tau_{v}": tau[v] for v in VARIANTS},
                               **{f"forwards_{v}": out[v][0].target_forwards for v in VARIANTS},
                               "forwards_reference": ref.target_forwards})
        s = {v: metrics.summarize(e) for v, e in ev.items()}
        row = {"draft_tokens": g, "prompts": len(prompts), "same_tokens": same_tokens,
               "transformers_variant_matches_reference_forwards": f"{ref_match}/{len(prompts)}"}
        for v in VARIANTS:
            row[v] = {"alpha": s[v].alpha, "acceptance_rate": s[v].acceptance_rate,
                      "tau": s[v].tau,
                      "target_forwards": s[v].target_forwards,
                      "per_position_conditional": s[v].per_position_conditional}
        for v, d in diffs.items():
            row[f"tau_cropped_minus_{v}"] = {
                "mean": sum(d) / len(d), "ci95": list(paired_bootstrap(d)),
                "prompts_better_cropped": sum(x > 0 for x in d),
                "prompts_better_other": sum(x < 0 for x in d)}
        rows.append(row)
        print(f"γ={g}: α " + ", ".join(f"{v} {s[v].alpha:.3f}" for v in VARIANTS), file=sys.stderr)
    result = {"target": args.target, "drafter": args.drafter, "max_new_tokens": args.max_new_tokens,
              "chat": not args.no_chat, "seconds": time.perf_counter() - t0,
              "torch": torch.__version__, "rows": rows, "per_prompt": per_prompt}
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "stale_kv.json").write_text(json.dumps(result, indent=1) + "\n")
    (out / "stale_kv.md").write_text(markdown(result))
    print(markdown(result))
    return 0


def markdown(result) -> str:
    n = result["rows"][0]["prompts"] if result["rows"] else 0
    lines = [f"## Stale KV entries after a rejection: {result['target']}", "",
             f"Greedy, {result['max_new_tokens']} new tokens per prompt, {n} prompts. cropped = our "
             "default (verified entries only); stale = one stale entry in every layer type "
             "(`stale_kv=True`); transformers = exactly what transformers 5.24 passes (one stale entry "
             "in full attention, every rejected draft's entry in sliding-window attention).", "",
             "| γ | α cropped | α stale | α transformers | τ cropped | τ stale | τ transformers | "
             "Δτ vs stale (95% CI) | Δτ vs transformers (95% CI) | same tokens | transformers variant = "
             "reference forwards |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in result["rows"]:
        cells = [str(r["draft_tokens"])]
        cells += [f"{r[v]['alpha']:.3f}" for v in VARIANTS]
        cells += [f"{r[v]['tau']:.3f}" for v in VARIANTS]
        for v in VARIANTS[1:]:
            d = r[f"tau_cropped_minus_{v}"]
            cells.append(f"{d['mean']:+.3f} ({d['ci95'][0]:+.3f}, {d['ci95'][1]:+.3f}); prompts "
                         f"{d['prompts_better_cropped']}:{d['prompts_better_other']}")
        cells += ["yes" if r["same_tokens"] else "NO",
                  r["transformers_variant_matches_reference_forwards"]]
        lines.append("| " + " | ".join(cells) + " |")
    lines += ["", "α: per-token acceptance (MLE); τ: tokens per target forward; Δτ = τ cropped − τ other, "
              "mean over prompts (positive favours cropping), with a paired bootstrap interval over "
              "prompts and how many prompts favour each side."]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
