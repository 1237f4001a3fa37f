"""What the client asks of a vLLM server changes what speculation seems to give it:
the bundled pair's 12 held-out prompts, 64 greedy tokens each, one request at a time, to a
speculating server and a plain one (alternating, 3 repeats, medians), asked three ways:
not streamed; streamed; streamed with ``logprobs`` and ``return_token_ids`` (what
mtp-viz's vLLM source and its traffic sweep ask for).

    python benchmarks/vllm_streaming.py --server http://127.0.0.1:8000 --baseline-server http://127.0.0.1:8001

Writes benchmarks/results/traffic/streaming.md. Tokens/s is completion tokens (the
server's usage count) over the client's wall time per request.
"""
from __future__ import annotations

import argparse
import json
import statistics
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def tokens_per_second(url: str, model: str, prompts: list[str], n: int, stream: bool, logprobs: bool) -> float:
    tokens = seconds = 0.0
    for p in prompts:
        body = {"model": model, "prompt": p, "max_tokens": n, "temperature": 0, "stream": stream}
        if logprobs:
            body.update(logprobs=1, return_token_ids=True)
        if stream:
            body["stream_options"] = {"include_usage": True}
        req = urllib.request.Request(url + "/v1/completions", data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})
        t = time.perf_counter()
        with OPENER.open(req, timeout=300) as r:
            data = r.read().decode()
        seconds += time.perf_counter() - t
        if stream:
            chunks = [json.loads(line[5:]) for line in data.splitlines() if line.startswith("data: {")]
            tokens += [c for c in chunks if c.get("usage")][-1]["usage"]["completion_tokens"]
        else:
            tokens += json.loads(data)["usage"]["completion_tokens"]
    return tokens / seconds


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--server", required=True)
    ap.add_argument("--baseline-server", required=True)
    ap.add_argument("--model", default="mtp_viz/assets/tiny/target")
    ap.add_argument("--max-new-tokens", type=int, default=64)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "traffic" / "streaming.md")
    args = ap.parse_args()
    prompts = [p["prompt"] for p in json.loads((ROOT / "mtp_viz/assets/tiny/eval_prompts.json").read_text())["prompts"]]
    servers = {"speculative": args.server.rstrip("/"), "plain": args.baseline_server.rstrip("/")}
    lines = ["| request | speculative tok/s | plain tok/s | speedup |", "|---|---|---|---|"]
    for label, stream, logprobs in (("not streamed", False, False), ("streamed", True, False),
                                    ("streamed, logprobs + token ids", True, True)):
        got: dict[str, list[float]] = {}
        for r in range(args.repeats):
            order = list(servers) if r % 2 == 0 else list(servers)[::-1]
            for name in order:
                got.setdefault(name, []).append(tokens_per_second(servers[name], args.model, prompts,
                                                                  args.max_new_tokens, stream, logprobs))
        s, b = statistics.median(got["speculative"]), statistics.median(got["plain"])
        lines.append(f"| {label} | {s:.1f} | {b:.1f} | ×{s / b:.2f} |")
        print(lines[-1], flush=True)
    head = (f"{len(prompts)} prompts × {args.max_new_tokens} greedy tokens, one request at a time, "
            f"{args.repeats} alternating repeats (medians), {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}.")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text("# vLLM: what the request asks for\n\n" + head + "\n\n" + "\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
