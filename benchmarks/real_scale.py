"""Plain decoding at a real Gemma 4 shape, every decoder in one interleaved run.

    python benchmarks/real_scale.py --target e2b --gguf-bf16 DIR --gguf-q8 DIR [--threads 1,2] [--out DIR]

The target is built at its real shape with random weights (``load_pair(..., weights="random")``,
bfloat16) and timed plain, greedy, against transformers' own ``generate`` and llama.cpp's
``llama-server`` on the same pair exported by ``mtp-viz gguf --weights random`` (the same
seed builds the same weights: bf16 and q8_0). For each thread count: one block with the
bf16 server (ours eager and compiled, transformers, llama.cpp bf16) and one with the q8_0
server (ours eager and compiled, llama.cpp q8_0), only one server resident at a time (both and our copy do not fit in 24 GB
together); within a block the decoders take turns, rotated each repeat. Every rate is
tokens ÷ wall seconds of the whole request (prompt included), medians of repeats; llama.cpp's
own decode-only rate is kept beside it.

The memory bandwidth each reaches is the weights a plain step reads (every parameter but the
per-layer embedding table, of which a step reads one row per layer) ÷ seconds per token,
beside this machine's own: a plain streaming read (a sum) of a buffer larger than the caches,
at the same threads. Writes real_scale.json and real_scale.md.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def stream_bandwidth(threads: int, gb: float = 2.0, repeats: int = 5) -> float:
    """Bytes per second of a sum over a float32 buffer of ``gb`` GB (median of repeats)."""
    import torch
    torch.set_num_threads(threads)
    x = torch.ones(int(gb * 1e9 / 4), dtype=torch.float32)
    x.sum()
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        x.sum()
        times.append(time.perf_counter() - t)
    return x.numel() * 4 / statistics.median(times)


def step_bytes(model) -> int:
    return sum(p.numel() * p.element_size() for n, p in model.named_parameters() if "embed_tokens_per_layer" not in n)


def serve(server: str, gguf: Path, threads: int, port: int, log: Path):
    cmd = [server, "-m", str(gguf / "target.gguf"), "-t", str(threads), "-tb", str(threads), "-c", "1024",
           "-np", "1", "--host", "127.0.0.1", "--port", str(port)]
    proc = subprocess.Popen(cmd, stdout=log.open("w"), stderr=subprocess.STDOUT, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    for _ in range(900):
        try:
            OPENER.open(url + "/health", timeout=5).read()
            return proc, url
        except OSError:
            if proc.poll() is not None:
                raise SystemExit(f"llama-server exited; see {log}")
            time.sleep(1)
    raise SystemExit(f"llama-server did not start; see {log}")


def llamacpp(url: str, ids: list[int], n: int) -> dict:
    body = json.dumps({"prompt": ids, "n_predict": n, "temperature": 0, "top_k": 1, "cache_prompt": False,
                       "ignore_eos": True, "return_tokens": True}).encode()
    req = urllib.request.Request(url + "/completion", body, {"Content-Type": "application/json"})
    t = time.perf_counter()
    out = json.loads(OPENER.open(req, timeout=3600).read())
    wall = time.perf_counter() - t
    return {"seconds": wall, "tokens": len(out.get("tokens") or []) or n, "ids": out.get("tokens") or [],
            "decode_tps": out.get("timings", {}).get("predicted_per_second")}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--target", default="e2b")
    ap.add_argument("--gguf-bf16", required=True)
    ap.add_argument("--gguf-q8", required=True)
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--new-tokens", type=int, default=64)
    ap.add_argument("--prompt-tokens", type=int, default=32)
    ap.add_argument("--out", default=str(ROOT / "benchmarks/results/real-scale"))
    args = ap.parse_args()
    import torch

    from mtp_viz.engine import loop
    from mtp_viz.measure import machine
    from mtp_viz.sources.models import load_pair
    server = subprocess.run(["bash", str(ROOT / "scripts/llamacpp.sh")], capture_output=True, text=True,
                            check=True).stdout.strip()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    t = time.perf_counter()
    pair = load_pair(args.target, weights="random", dtype="bfloat16", drafter_kind="lookup")
    built = time.perf_counter() - t
    n, repeats = args.new_tokens, args.repeats
    g = torch.Generator().manual_seed(7)
    ids = torch.randint(3, pair.target.config.text_config.vocab_size, (args.prompt_tokens,), generator=g).tolist()
    per_token_bytes = step_bytes(pair.target)
    from mtp_viz.sources.settings import RunSettings
    t = time.perf_counter()
    plan = RunSettings("x" * len(ids), modes=("autoregressive",), max_new_tokens=n, chat=False)
    compiled_pair = pair.compiled(settings=[plan])   # its graphs now, before any timing
    compiled_s = time.perf_counter() - t
    print(f"compiled in {compiled_s:.0f} s ({compiled_pair.compile_note or compiled_pair.engine})", file=sys.stderr)

    def ours():
        t = time.perf_counter()
        done = list(loop.autoregressive(pair.decoder, ids, max_new_tokens=n))[-1]
        return {"seconds": time.perf_counter() - t, "tokens": done.new_tokens, "ids": list(done.generated_ids)}

    def compiled():
        t = time.perf_counter()
        done = list(loop.autoregressive(compiled_pair.decoder, ids, max_new_tokens=n))[-1]
        return {"seconds": time.perf_counter() - t, "tokens": done.new_tokens, "ids": list(done.generated_ids)}

    def transformers_generate():
        x = torch.tensor([ids])
        t = time.perf_counter()
        with torch.inference_mode():
            o = pair.target.generate(x, attention_mask=torch.ones_like(x), do_sample=False, max_new_tokens=n,
                                     min_new_tokens=n, eos_token_id=None, pad_token_id=0)
        return {"seconds": time.perf_counter() - t, "tokens": o.shape[1] - len(ids), "ids": o[0, len(ids):].tolist()}

    results = {"meta": {"target": args.target, "weights": "random", "precision": "bfloat16",
                        "prompt_tokens": len(ids), "new_tokens": n, "repeats": repeats, "build_seconds": built,
                        "step_bytes": per_token_bytes, "clock": "wall",
                        "compile_seconds": compiled_s, "compile_note": compiled_pair.compile_note}, "threads": {}}
    log = out / "llama-server.log"
    for threads in [int(x) for x in args.threads.split(",")]:
        torch.set_num_threads(threads)
        m = machine.machine()
        bw = stream_bandwidth(threads)
        torch.set_num_threads(threads)
        block: dict[str, list] = {}
        for name, folder in (("llama.cpp bf16", Path(args.gguf_bf16)), ("llama.cpp q8_0", Path(args.gguf_q8))):
            proc, url = serve(server, folder, threads, 8391, log)
            try:
                arms = {"mtp-viz eager": ours, "mtp-viz compiled": compiled,
                        name: lambda url=url: llamacpp(url, ids, n)}
                if name.endswith("bf16"):
                    arms["transformers generate"] = transformers_generate
                for fn in arms.values():
                    fn()   # untimed warm-up
                keys = list(arms)
                for r in range(repeats):
                    for k in keys[r % len(keys):] + keys[:r % len(keys)]:
                        row = k if not k.startswith("mtp-viz") else f"{k} ({name} block)"
                        block.setdefault(row, []).append(arms[k]())
                        print(f"threads {threads} {k}: {block[row][-1]['seconds']:.1f} s", file=sys.stderr)
            finally:
                os.killpg(proc.pid, 15)
                proc.wait()
        rows = {}
        for k, rs in block.items():
            tps = [r["tokens"] / r["seconds"] for r in rs]
            med = statistics.median(tps)
            rows[k] = {"tokens_per_second": med, "repeats": tps, "ms_per_token": 1e3 / med,
                       "decode_tokens_per_second": statistics.median([r["decode_tps"] for r in rs])
                       if rs[0].get("decode_tps") else None, "ids": rs[0]["ids"][:16]}
        for k, row in rows.items():
            # q8_0 stores 32 weights in 34 bytes where bf16 takes 64 (norms, a sliver, stay float32)
            bytes_per_token = per_token_bytes * (34 / 64 if k.endswith("q8_0") else 1)
            row["bandwidth_GBps"] = bytes_per_token * row["tokens_per_second"] / 1e9
        results["threads"][str(threads)] = {"machine": m, "machine_line": machine.line(m),
                                            "stream_GBps": bw / 1e9, "decoders": rows}
    (out / "real_scale.json").write_text(json.dumps(results, indent=1), encoding="utf-8")
    lines = [f"# Plain decoding at {args.target}'s shape (random weights: timings only), bfloat16", "",
             f"Prompt {len(ids)} token ids, {n} new tokens, greedy, medians of {repeats} repeats, wall time of "
             f"the whole request; a plain step reads {per_token_bytes / 1e9:.2f} GB of weights (bf16).", ""]
    for threads, t in results["threads"].items():
        lines += [f"## {threads} thread(s): {t['machine_line']}", "",
                  f"A streaming read of this machine's memory: {t['stream_GBps']:.1f} GB/s.", "",
                  "| decoder | tok/s | ms/token | decode-only tok/s (server's own) | GB/s of weights |",
                  "|---|---|---|---|---|"]
        for k, row in t["decoders"].items():
            dec = f"{row['decode_tokens_per_second']:.2f}" if row["decode_tokens_per_second"] else "–"
            bw = f"{row['bandwidth_GBps']:.1f}" + (" (q8_0: 34/64 of bf16's bytes)" if k.endswith("q8_0") else "")
            lines.append(f"| {k} | {row['tokens_per_second']:.3f} | {row['ms_per_token']:.0f} | {dec} | {bw} |")
        lines.append("")
    (out / "real_scale.md").write_text("\n".join(lines) + "\n", encoding="utf-8")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
