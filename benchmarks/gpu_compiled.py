"""The compiled engine on a GPU, with CUDA graphs: the check to run where a GPU is lent.

    python -m benchmarks.gpu_compiled                 # from the repository root, on a CUDA machine
    python -m benchmarks.gpu_compiled --mode default  # inductor's kernels without CUDA graphs

On the GPU, eager decoding of a small model is bound by kernel launches, as a CPU's is
by Python: ``torch.compile(mode="reduce-overhead")`` records each compiled graph as a
CUDA graph and replays it with one launch. This script checks, on the bundled pair and
on a small random pair of every Gemma 4 text class the suite builds:

1. greedy parity: the compiled engine's speculative and plain outputs equal
   transformers' ``generate`` token for token (float32, so rounding cannot excuse a
   difference), past the sliding window and with rejected drafts;
2. speed: eager and compiled, plain and MTP, tokens per second on the bundled pair's 12
   held-out prompts (64 tokens, 4 drafts), interleaved, medians of 3 repeats, compile
   time apart.

It prints one table and writes ``benchmarks/results/gpu-compiled/result.json``. It exits
with status 1 on a parity failure. It has not run yet: no GPU was lent to the session
that wrote it (see the README's "The compiled engine").
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path


def parity(device: str, mode: str) -> list[str]:
    """Failures (empty: none) of the compiled engine against transformers' greedy."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
    from factories import gemma_assistant, gemma_multimodal, gemma_target, greedy_reference
    from mtp_viz.engine import compiled, loop
    from mtp_viz.engine.drafters.mtp import MTPDrafter
    failures = []
    prompt = list(range(3, 23))
    for name, build in (("Gemma4ForCausalLM", gemma_target), ("Gemma4ForConditionalGeneration", gemma_multimodal),
                        ("Gemma4ForConditionalGeneration MoE", lambda: gemma_multimodal(moe=True))):
        target, assistant = build().to(device), gemma_assistant().to(device)
        fast = compiled.FastTarget(target, mode=mode)
        drafter = MTPDrafter(assistant, target, compiled.FastDraftStep(assistant, fast.window, mode=mode))
        want = greedy_reference(target.cpu(), prompt, 48)
        target.to(device)
        for label, events in (("speculative", loop.speculative(fast, drafter, prompt, max_new_tokens=48)),
                              ("autoregressive", loop.autoregressive(fast, prompt, max_new_tokens=48))):
            got = list(list(events)[-1].generated_ids)
            if got != want or fast.graph.note:
                failures.append(f"{name} {label}: {fast.graph.note or 'tokens differ from transformers'}")
    return failures


def speed(device: str, mode: str, repeats: int) -> dict:
    from mtp_viz.paths import assets_dir
    from mtp_viz.sources.models import load_pair
    pair = load_pair("tiny", device=device, dtype="float32")
    fast = pair.on("compiled", mode=mode)
    note, compile_seconds = fast.compile_note, fast.compile_seconds
    if note:
        raise SystemExit(f"gpu_compiled: {note}")
    prompts = [p["prompt"] for p in json.loads((assets_dir() / "tiny" / "eval_prompts.json").read_text())["prompts"]]
    arms = {f"{engine} {m}": (p, m) for engine, p in (("eager", pair), ("compiled", fast))
            for m in ("autoregressive", "speculative")}
    for p, m in arms.values():  # warm-up
        list(p.generate(prompts[0], mode=m, max_new_tokens=16, draft_tokens=4, chat=False))
    per = {a: [] for a in arms}
    names = list(arms)
    for r in range(repeats):
        tokens, seconds = {a: 0 for a in arms}, {a: 0.0 for a in arms}
        for i, prompt in enumerate(prompts):
            shift = (r * len(prompts) + i) % len(names)
            for a in names[shift:] + names[:shift]:
                p, m = arms[a]
                done = list(p.generate(prompt, mode=m, max_new_tokens=64, draft_tokens=4, chat=False))[-1]
                tokens[a] += done.new_tokens
                seconds[a] += done.seconds
        for a in arms:
            per[a].append(tokens[a] / seconds[a])
    tps = {a: statistics.median(v) for a, v in per.items()}
    return {"tokens_per_second": tps, "compile_seconds": compile_seconds, "mode": mode,
            "compiled_over_eager": {m: tps[f"compiled {m}"] / tps[f"eager {m}"]
                                    for m in ("autoregressive", "speculative")}}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--mode", default="reduce-overhead", help="torch.compile mode (reduce-overhead: CUDA graphs)")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--out", default="benchmarks/results/gpu-compiled")
    args = ap.parse_args()
    import torch
    if not torch.cuda.is_available():
        print("gpu_compiled: no CUDA device here; this check runs on a GPU.", file=sys.stderr)
        return 2
    failures = parity("cuda", args.mode)
    result = {"device": torch.cuda.get_device_name(), "torch": torch.__version__, "parity_failures": failures,
              **speed("cuda", args.mode, args.repeats)}
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "result.json").write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps(result, indent=1))
    return 1 if failures else 0


if __name__ == "__main__":
    raise SystemExit(main())
