#!/usr/bin/env bash
# Rebuild mtp_viz/assets/tiny exactly as shipped: about 2.75 hours of wall-clock on 2 CPU cores.
# Each trainer stops at its step count or its time budget, whichever comes first.
# Phases 3 and 4 run on one thread: on a shared 2-core machine that is faster than two contending ones.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-mtp_viz/assets/tiny}
BENCH=${2:-benchmarks/results/tiny-code}
# 1. tokenizer + 6-layer target, phase 1 (batches of 16 x 256 tokens)
nice -n 5 python -m training.train_tiny --out "$OUT" --stages target --target-minutes 45 --target-steps 1600
# 2. target, phase 2: continue from phase 1 with a fresh warmup + cosine (batches of 8 x 256 tokens)
nice -n 5 python -m training.train_tiny --out "$OUT" --stages target --target-continue \
    --target-batch 8 --target-minutes 20 --target-steps 1000
# 3. target, phase 3: depth up-scaling to 24 layers (inserted layers start as exact identities), then training
nice -n 5 python -m training.train_tiny --out "$OUT" --stages target --target-continue --target-upscale 24 \
    --target-batch 8 --target-lr 3e-4 --target-minutes 34 --target-steps 2000 --threads 1
# 4. the 2-layer drafter (sliding + full, 128 wide) against the frozen 24-layer target (every anchor of each sequence), then evaluation
nice -n 5 python -m training.train_tiny --out "$OUT" --stages drafter,eval --drafter-minutes 58 --drafter-steps 5000 \
    --drafter-batch 4 --drafter-anchors 256 --drafter-unroll 6 --threads 1
# 5. wall-clock benchmark on the held-out prompts (run it on a quiet machine), then the model card
mtp-viz bench --target "$OUT/target" --drafter "$OUT/drafter" --prompts "$OUT/eval_prompts.json" --no-chat \
    --threads 1 --draft-tokens 2,3,4,6,8 --schedules constant --repeats 3 --out "$BENCH" --force
python -m training.card --out "$OUT" --bench "$BENCH/bench.json"
