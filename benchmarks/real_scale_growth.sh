#!/usr/bin/env bash
# How cost grows with the work at E2B's real shape (random weights, bfloat16, eager engine,
# 2 threads): the profile at prompts of 32, 512 and 2,048 tokens (64 new tokens each), and at
# 512 new tokens after a 32-token prompt. One profile at a time, alone on the machine:
#   bash benchmarks/real_scale_growth.sh [OUT]     # default benchmarks/results/real-scale/growth
# Each writes OUT/<case>/profile.json and profile.md; `mtp-viz profile --help` says what they hold.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-benchmarks/results/real-scale/growth}
PY=${PYTHON:-.venv/bin/python}
common=(--target e2b --weights random --dtype bfloat16 --threads 2 --draft-tokens 4 --max-draft-tokens 4
        --alphas 0.7)
for case in "p512-n64 512 64 2" "p2048-n64 2048 64 2" "p32-n512 32 512 1"; do
  set -- $case
  echo "== $1: prompt $2, $3 new tokens, $4 repeat(s)" >&2
  /usr/bin/time -v "$PY" -m mtp_viz profile "${common[@]}" --prompt-tokens "$2" --max-new-tokens "$3" \
    --repeats "$4" --out "$OUT/$1" 2> "$OUT.$1.time.log" || { tail -20 "$OUT.$1.time.log" >&2; exit 1; }
  grep -E "Elapsed|Maximum resident" "$OUT.$1.time.log" >&2
done
