"""Wall time of the engine against transformers' own assisted generation, same output.

For each draft length, runs every held-out prompt of the bundled pair through
``speculative()`` (consuming the whole event stream) and through
``target.generate(assistant_model=...)``, greedy, interleaved in a rotating order,
and reports the ratio of medians over repeats. Outputs are checked token-identical.

    python benchmarks/engine_vs_transformers.py --gammas 1,2,4,8 --repeats 5
"""
from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import torch

from mtp_viz.engine.loop import speculative
from mtp_viz.engine.schedules import make_schedule
from mtp_viz.paths import assets_dir
from mtp_viz.sources.models import load_pair


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--target", default="tiny")
    ap.add_argument("--gammas", default="1,2,4,8")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--max-new-tokens", type=int, default=64)
    ap.add_argument("--out", default=str(Path(__file__).parent / "results" / "engine_vs_transformers.md"))
    args = ap.parse_args()
    torch.set_num_threads(1)
    pair = load_pair(args.target)
    prompts = json.loads((assets_dir() / "tiny" / "eval_prompts.json").read_text())["prompts"]
    ids = [pair.encode(p["prompt"], chat=False) for p in prompts]
    eos = pair.eos_token_ids
    gc = pair.drafter_model.generation_config

    def ours(draft_tokens):
        return [list(speculative(pair.target, pair.make_drafter("mtp"), x, max_new_tokens=args.max_new_tokens,
                                 schedule=make_schedule("constant", draft_tokens, 16),
                                                  eos_token_ids=eos))[-1].generated_ids
                for x in ids]

    def ref(draft_tokens):
        gc.num_assistant_tokens, gc.num_assistant_tokens_schedule = draft_tokens, "constant"
        with torch.inference_mode():
            return [tuple(pair.target.generate(torch.tensor([x]),
                                               attention_mask=torch.ones(1, len(x), dtype=torch.long),
                                               assistant_model=pair.drafter_model, do_sample=False,
                                               max_new_tokens=args.max_new_tokens, eos_token_id=eos,
                                               pad_token_id=0)[0, len(x):].tolist())
                    for x in ids]

    rows = ["| γ | ours (s) | transformers (s) | ours ÷ transformers | same tokens |", "|---|---|---|---|---|"]
    for draft_tokens in [int(g) for g in args.gammas.split(",")]:
        same = ours(draft_tokens) == ref(draft_tokens)  # also warms up both
        times = {"ours": [], "ref": []}
        for i in range(args.repeats):
            for name in (("ours", "ref") if i % 2 == 0 else ("ref", "ours")):
                t = time.perf_counter()
                (ours if name == "ours" else ref)(draft_tokens)
                times[name].append(time.perf_counter() - t)
        a, b = statistics.median(times["ours"]), statistics.median(times["ref"])
        rows.append(f"| {draft_tokens} | {a:.3f} | {b:.3f} | {a / b:.3f} | {'yes' if same else 'NO'} |")
        print(rows[-1], flush=True)
    text = (f"# Engine vs transformers, {args.target}\n\n"
            f"{len(ids)} prompts x {args.max_new_tokens} new tokens, greedy, "
            f"medians of {args.repeats} interleaved repeats, 1 torch thread, torch {torch.__version__}.\n\n"
            + "\n".join(rows) + "\n")
    Path(args.out).write_text(text)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
