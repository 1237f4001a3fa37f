"""Experiment: does the drafter accept more with or without transformers' stale KV entry?

After a rejection, transformers 5.24 (``SinglePositionMultiTokenCandidateGenerator``)
crops the target's shared KV to the length of the verified sequence, which still
includes one entry computed from the first *rejected* draft token (the position the
correction token now holds). Our engine crops that entry by default
(``stale_kv=False``); ``stale_kv=True`` keeps it, like transformers.

Greedy decoding gives the same tokens either way (the target decides every token), so
the comparison is exact and needs no timing: for each prompt and draft length we count
accepted drafts, rejections, target forwards. The stale variant is also checked
against transformers' own assisted decoding: same drafts, so the same number of target
forwards. Results: benchmarks/results/stale_kv.{json,md}.

    python benchmarks/stale_kv.py                         # the bundled tiny pair
    python benchmarks/stale_kv.py --target T --drafter D  # any Gemma 4 pair
"""
from __future__ import annotations

import argparse
import json
import random
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from mtp_viz import metrics  # noqa: E402
from mtp_viz.bench import Runner, Setting, load_prompts  # noqa: E402


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
    from mtp_viz.models import load_pair
    from mtp_viz.sampling import Sampling
    torch.set_num_threads(args.threads)
    pair = load_pair(args.target, args.drafter)
    prompts = load_prompts(args.prompts)
    if args.extra_prompts:
        prompts += load_prompts(args.extra_prompts)
    encoded = [pair.encode(q["text"], chat=not args.no_chat) for q in prompts]
    gammas = [int(x) for x in args.draft_tokens.split(",")]
    runners = {stale: Runner(pair, pair.make_drafter("mtp"), args.max_new_tokens, Sampling(), stale, 16)
               for stale in (False, True)}
    rows, per_prompt = [], []
    t0 = time.perf_counter()
    for g in gammas:
        setting = Setting("constant", g)
        ev = {False: [], True: []}
        diffs, same_tokens, ref_match = [], True, 0
        for q, ids in zip(prompts, encoded):
            out = {}
            for stale, runner in runners.items():
                rec, events = runner.ours(ids, setting)
                out[stale] = (rec, events)
                ev[stale].extend(events)
            ref, _ = runners[True].reference(ids, g)
            same_tokens &= out[False][0]["ids"] == out[True][0]["ids"] == ref["ids"]
            ref_match += out[True][0]["target_forwards"] == ref["target_forwards"]
            a = {s: metrics.alpha_estimate(out[s][1]) for s in out}
            tau = {s: metrics.mean_accepted_length(out[s][1]) for s in out}
            diffs.append(tau[False] - tau[True])
            per_prompt.append({"gamma": g, "prompt_id": q["id"], "category": q["category"],
                               "alpha_cropped": a[False], "alpha_stale": a[True],
                               "tau_cropped": tau[False], "tau_stale": tau[True],
                               "forwards_cropped": out[False][0]["target_forwards"],
                               "forwards_stale": out[True][0]["target_forwards"],
                               "forwards_transformers": ref["target_forwards"]})
        s = {k: metrics.summarize(v) for k, v in ev.items()}
        lo, hi = paired_bootstrap(diffs)
        rows.append({
            "gamma": g, "prompts": len(prompts),
            "cropped": {"alpha": s[False].alpha, "acceptance_rate": s[False].acceptance_rate,
                        "tokens_per_forward": s[False].mean_accepted_length,
                        "target_forwards": s[False].target_forwards,
                        "per_position_conditional": s[False].per_position_conditional},
            "stale": {"alpha": s[True].alpha, "acceptance_rate": s[True].acceptance_rate,
                      "tokens_per_forward": s[True].mean_accepted_length,
                      "target_forwards": s[True].target_forwards,
                      "per_position_conditional": s[True].per_position_conditional},
            "tau_difference_mean": sum(diffs) / len(diffs), "tau_difference_ci95": [lo, hi],
            "prompts_better_cropped": sum(d > 0 for d in diffs),
            "prompts_better_stale": sum(d < 0 for d in diffs),
            "same_tokens": same_tokens,
            "stale_matches_transformers_forwards": f"{ref_match}/{len(prompts)}",
        })
        print(f"γ={g}: α cropped {s[False].alpha:.3f} vs stale {s[True].alpha:.3f}; "
              f"τ {s[False].mean_accepted_length:.3f} vs {s[True].mean_accepted_length:.3f}",
              file=sys.stderr)
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
    lines = [f"## Stale KV entry after a rejection: {result['target']}", "",
             f"Greedy, {result['max_new_tokens']} new tokens per prompt, "
             f"{result['rows'][0]['prompts'] if result['rows'] else 0} prompts. "
             "cropped = our default (drop the KV entry of the rejected draft); "
             "stale = transformers 5.24 (keep it).", "",
             "| γ | α cropped | α stale | accept cropped | accept stale | τ cropped | τ stale | "
             "Δτ (95% CI) | prompts better: cropped / stale | same tokens | stale = transformers forwards |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in result["rows"]:
        c, s = r["cropped"], r["stale"]
        lo, hi = r["tau_difference_ci95"]
        lines.append(
            f"| {r['gamma']} | {c['alpha']:.3f} | {s['alpha']:.3f} | {c['acceptance_rate']:.1%} | "
            f"{s['acceptance_rate']:.1%} | {c['tokens_per_forward']:.3f} | {s['tokens_per_forward']:.3f} | "
            f"{r['tau_difference_mean']:+.3f} ({lo:+.3f}, {hi:+.3f}) | {r['prompts_better_cropped']} / "
            f"{r['prompts_better_stale']} | {'yes' if r['same_tokens'] else 'NO'} | "
            f"{r['stale_matches_transformers_forwards']} |")
    lines += ["", "Δτ = τ cropped − τ stale per prompt (tokens per target forward), mean over prompts; "
              "positive favours cropping."]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
