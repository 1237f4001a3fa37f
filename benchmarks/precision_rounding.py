"""Where and why speculative greedy output departs from plain greedy output, per precision.

For each precision of the bundled pair (both models in it) and each of its 12 held-out
prompts, plain decoding (one position per forward) and speculative decoding (the newest
token and k drafts per forward) run 256 greedy tokens, and a forward hook records the
target's logits for every position in each. Reported per prompt:

- ``first``: the first generated token where the two outputs differ (none: identical);
- ``noise``: over the common prefix (and the first differing position), the largest
  difference between the two runs' logits for the same position, in ULPs of the target's
  dtype at that row's largest logit: how differently the two batch shapes round;
- ``gap_plain`` / ``gap_spec`` at the first difference: by how much each run's own token
  beat the other run's token in its own logits (in ULPs). Both small: a tie at this
  precision, broken one way by one shape and the other way by the other.

Counts and logits only, no timings: the machine's load does not matter. Run:
``python benchmarks/precision_rounding.py --out benchmarks/results/precision``.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from mtp_viz.engine.loop import autoregressive, speculative  # noqa: E402
from mtp_viz.prompts import code_suite, load_prompts  # noqa: E402
from mtp_viz.sources.models import load_pair  # noqa: E402
from rounding import LogitTap, first_difference, ulp  # noqa: E402


def one(pair, ids, n, k) -> dict:
    with LogitTap(pair.target, len(ids)) as tap:
        plain = list(list(autoregressive(pair.target, ids, max_new_tokens=n))[-1].generated_ids)
    a = tap.rows
    with LogitTap(pair.target, len(ids)) as tap:
        spec = list(list(speculative(pair.target, pair.make_drafter("mtp"), ids, max_new_tokens=n,
                                     draft_tokens=k))[-1].generated_ids)
    b = tap.rows
    dtype = pair.target.dtype
    first = first_difference(plain, spec)
    upto = len(plain) if first is None else first + 1
    noise = max((a[i] - b[i]).abs().max().item() / ulp(dtype, a[i].abs().max().item()) for i in range(upto))
    out = {"first": first, "noise_ulps": round(noise, 2)}
    if first is not None:
        x, y = plain[first], spec[first]
        unit = ulp(dtype, a[first].abs().max().item())
        out.update(gap_plain_ulps=round((a[first][x] - a[first][y]).item() / unit, 2),
                   gap_spec_ulps=round((b[first][y] - b[first][x]).item() / unit, 2),
                   top_logit=round(a[first].max().item(), 3), ulp=unit)
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--precisions", default="float32,int8,bfloat16,float16")
    p.add_argument("--max-new-tokens", type=int, default=256)
    p.add_argument("--draft-tokens", type=int, default=4)
    p.add_argument("--out", default="benchmarks/results/precision")
    args = p.parse_args(argv)
    torch.set_num_threads(1)
    prompts = load_prompts(code_suite(), default_category="code")
    rows = []
    for precision in args.precisions.split(","):
        pair = load_pair("tiny", dtype=precision)
        for pr in prompts:
            r = {"precision": precision, "prompt": pr.id, **one(pair, pair.encode(pr.text, chat=False),
                                                               args.max_new_tokens, args.draft_tokens)}
            print(json.dumps(r), flush=True)
            rows.append(r)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    meta = {"max_new_tokens": args.max_new_tokens, "draft_tokens": args.draft_tokens, "torch": torch.__version__}
    (out / "rounding.json").write_text(json.dumps({"meta": meta, "rows": rows}, indent=1) + "\n")
    (out / "rounding.md").write_text(markdown(rows, meta))
    return 0


def markdown(rows, meta) -> str:
    lines = [f"## Plain vs speculative greedy decoding, bundled pair, {meta['max_new_tokens']} tokens, "
             f"{meta['draft_tokens']} drafts, 12 held-out prompts (torch {meta['torch']})", "",
             "| precision (both models) | prompts that part | first differing token | max logit noise (ULPs) "
             "| gaps at the first difference, plain / speculative (ULPs) |", "|---|---|---|---|---|"]
    for precision in dict.fromkeys(r["precision"] for r in rows):
        rs = [r for r in rows if r["precision"] == precision]
        parted = [r for r in rs if r["first"] is not None]
        firsts = ", ".join(str(r["first"]) for r in parted) or "–"
        gaps = ", ".join(f"{r['gap_plain_ulps']:g} / {r['gap_spec_ulps']:g}" for r in parted) or "–"
        lines.append(f"| {precision} | {len(parted)} of {len(rs)} | {firsts} | "
                     f"{max(r['noise_ulps'] for r in rs):g} | {gaps} |")
    lines += ["", "noise: the largest difference between the two runs' logits for one position over their common "
              "prefix, in units in the last place of the target's dtype at that row's largest logit (float32's "
              "ULP is 2⁻¹⁶ of bfloat16's, so 16 float32 ULPs are far smaller than 2 bfloat16 ULPs); gaps: by how "
              "much each run's own token beat the other's in its own logits where they first part."]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
