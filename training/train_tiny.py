"""Build the bundled offline model pair: tokenizer, tiny Gemma 4 target, MTP drafter, eval, model card.

The shipped pair (a 24-layer target grown from a 6-layer one, and a 2-layer drafter) is built by a sequence of
these runs: see training/build_bundled.sh. With the defaults, one run trains the 6-layer target from scratch and
a drafter for it (about 85 minutes on 2 CPU cores):

    nice -n 5 python -m training.train_tiny --out mtp_viz/assets/tiny

Smoke test (well under a minute):

    python -m training.train_tiny --quick --out /tmp/tiny-quick

Stages can be run separately (each reads what the previous ones wrote to --out):

    python -m training.train_tiny --out mtp_viz/assets/tiny --stages target
    python -m training.train_tiny --out mtp_viz/assets/tiny --stages drafter,eval
"""

from __future__ import annotations

import argparse
import json
import platform
import time
from pathlib import Path

import torch

from .common import seed_everything
from .data import encode_files, read_text, split_files, train_tokenizer

STAGES = ("target", "drafter", "eval")


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", type=Path, default=Path("mtp_viz/assets/tiny"))
    p.add_argument("--quick", action="store_true", help="tiny models, a few steps: a smoke test of the pipeline")
    p.add_argument("--stages", default=",".join(STAGES), help=f"comma-separated subset of {STAGES}")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--vocab-size", type=int, default=4096)
    p.add_argument("--seq-len", type=int, default=256)
    p.add_argument("--target-steps", type=int, default=1600)
    p.add_argument("--target-minutes", type=float, default=45.0)
    p.add_argument("--target-batch", type=int, default=16)
    p.add_argument("--target-lr", type=float, default=1.5e-3)
    p.add_argument("--target-continue", action="store_true",
                   help="continue training the target saved in --out (a second warmup + cosine phase, appended to "
                        "the log) instead of starting from scratch; reuses its tokenizer")
    p.add_argument("--target-upscale", type=int, default=0, metavar="LAYERS",
                   help="with --target-continue: first grow the saved target to this many layers by depth "
                        "up-scaling (inserted layers start as exact identities), then train it")
    p.add_argument("--storage", choices=("bfloat16", "float32"), default="bfloat16",
                   help="dtype of the saved safetensors (configs keep float32, so the pair loads as float32)")
    p.add_argument("--drafter-steps", type=int, default=3000)
    p.add_argument("--drafter-minutes", type=float, default=35.0)
    p.add_argument("--drafter-batch", type=int, default=8)
    p.add_argument("--drafter-anchors", type=int, default=64,
                   help="anchor positions sampled per sequence per step (capped at every usable position)")
    p.add_argument("--drafter-unroll", type=int, default=4)
    p.add_argument("--drafter-lr", type=float, default=1.5e-3)
    p.add_argument("--num-eval-prompts", type=int, default=12)
    a = p.parse_args(argv)
    if a.quick:
        a.vocab_size, a.seq_len = 512, 64
        a.target_steps, a.target_minutes, a.target_batch = 8, 0.1, 8
        a.drafter_steps, a.drafter_minutes, a.drafter_batch, a.drafter_anchors = 3, 0.1, 4, 16
        a.num_eval_prompts = 3
    return a


def file_split(quick: bool):
    train_files, held_files = split_files()
    if quick:
        train_files, held_files = train_files[:40], held_files[:6]
    return train_files, held_files


def _next_phase(log_dir: Path) -> int:
    path = log_dir / "target_log.jsonl"
    lines = [json.loads(line) for line in path.read_text().splitlines() if line.strip()] if path.exists() else []
    return 1 + sum(1 for r in lines if r.get("event") == "done")


def main(argv=None):
    args = parse_args(argv)
    if args.target_upscale and not args.target_continue:
        raise SystemExit("--target-upscale grows the saved target: use it with --target-continue")
    torch.set_num_threads(args.threads)
    seed_everything(args.seed)
    stages = [s.strip() for s in args.stages.split(",") if s.strip()]
    out: Path = args.out
    log_dir = out / "logs"
    out.mkdir(parents=True, exist_ok=True)
    train_files, held_files = file_split(args.quick)
    t_start = time.time()

    if "target" in stages:
        from .train_target import train_target

        t0 = time.time()
        if args.target_continue:
            from transformers import AutoTokenizer

            tokenizer = AutoTokenizer.from_pretrained(out / "target")
        else:
            tokenizer = train_tokenizer((read_text(f) for f in train_files), args.vocab_size)
        train_docs = encode_files(tokenizer, train_files)
        val_docs = encode_files(tokenizer, held_files)
        print(f"tokenizer: {len(tokenizer)} tokens in {time.time() - t0:.1f}s; "
              f"{sum(map(len, train_docs))} train / {sum(map(len, val_docs))} held-out tokens", flush=True)
        train_target(tokenizer, train_docs, val_docs, out / "target", log_dir, quick=args.quick, seed=args.seed,
                     max_steps=args.target_steps, minutes=args.target_minutes, batch_size=args.target_batch,
                     seq_len=args.seq_len, peak_lr=args.target_lr,
                     init_from=(out / "target") if args.target_continue else None,
                     phase=_next_phase(log_dir) if args.target_continue else 1,
                     upscale_layers=args.target_upscale or None, storage=args.storage)
        from .prompts import write_eval_prompts

        write_eval_prompts(tokenizer, held_files, out / "eval_prompts.json", n=args.num_eval_prompts)

    if "drafter" in stages:
        from .train_drafter import train_drafter

        train_drafter(args, out, log_dir, train_files, held_files)

    if "eval" in stages:
        from .evaluate import evaluate_pair

        evaluate_pair(out, log_dir, quick=args.quick)

    meta_path = log_dir / "run.json"
    meta = json.loads(meta_path.read_text()) if meta_path.exists() else {}
    meta.update({
        "python": platform.python_version(), "torch": torch.__version__, "platform": platform.platform(),
        "processor": platform.processor() or platform.machine(), "threads": args.threads,
        "args": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
    })
    meta.setdefault("stage_seconds", {})[",".join(stages)] = round(time.time() - t_start, 1)
    meta_path.write_text(json.dumps(meta, indent=2))


if __name__ == "__main__":
    main()
