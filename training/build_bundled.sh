#!/usr/bin/env bash
# Rebuild mtp_viz/assets/tiny exactly as shipped: about 90 minutes of wall-clock on 2 CPU cores.
# Each trainer stops at its step count or its time budget, whichever comes first.
# The drafter runs on one thread: on a shared 2-core machine that is faster than two contending ones.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-mtp_viz/assets/tiny}
# 1. tokenizer + target, phase 1 (batches of 16 x 256 tokens)
nice -n 5 python -m training.train_tiny --out "$OUT" --stages target --target-minutes 45 --target-steps 1600
# 2. target, phase 2: continue from phase 1 with a fresh warmup + cosine (batches of 8 x 256 tokens)
nice -n 5 python -m training.train_tiny --out "$OUT" --stages target --target-continue \
    --target-batch 8 --target-minutes 20 --target-steps 1000
# 3. drafter against the frozen target, then evaluation
nice -n 5 python -m training.train_tiny --out "$OUT" --stages drafter,eval --drafter-minutes 25 --threads 1
# 4. model card and loss curves
python -m training.card --out "$OUT"
