"""The engine's own CPU kernel (``mtp_viz::rows``) beside ATen's products: the weights each
reads per second for the rows of a decode step (1) and of verifications (5, 9), in bfloat16,
float32 and int8, at every instruction set this CPU has (the lower ones as an AVX2-only or
AVX-512-only CPU would run them: the same kernel, capped).

    python benchmarks/kernel_bandwidth.py [--threads 1] [--out benchmarks/results/kernel]

W is 65,536 × 1,536 (a slice of E2B's LM head: 201 MB in bfloat16, past every cache);
medians of 15 calls after 3 untimed ones. ATen: ``F.linear`` (bfloat16, float32) and
``torch._weight_int8pack_mm`` (int8 with a scale a row, what torchao's int8 weight-only
product calls on a CPU). Writes kernel_bandwidth.json and kernel_bandwidth.md.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
N, K, ROWS = 65536, 1536, (1, 5, 9)


def rate(fn, nbytes: int, repeats: int = 15) -> float:
    for _ in range(3):
        fn()
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return nbytes / statistics.median(times) / 1e9


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--out", default=str(ROOT / "benchmarks/results/kernel"))
    args = ap.parse_args()
    import torch

    from mtp_viz.engine import kernels
    from mtp_viz.measure import machine
    torch.set_num_threads(args.threads)
    if not kernels.load():
        raise SystemExit(kernels.note())
    best = int(torch.ops.mtp_viz.best_isa())
    g = torch.Generator().manual_seed(0)
    w32 = torch.randn(N, K, generator=g)
    weights = {"bfloat16": (w32.bfloat16(), None), "float32": (w32, None),
               "int8": (torch.randint(-127, 128, (N, K), generator=g, dtype=torch.int8), torch.rand(N) / 64)}
    rows: list[dict] = []
    for kind, (w, scale) in weights.items():
        nbytes = w.numel() * w.element_size()
        for m in ROWS:
            x = torch.randn(m, K, dtype=torch.bfloat16 if kind == "bfloat16" else torch.float32)
            if kind == "int8":
                aten = rate(lambda: torch._weight_int8pack_mm(x, w, scale), nbytes)
            else:
                aten = rate(lambda: torch.nn.functional.linear(x, w), nbytes)
            row = {"weights": kind, "rows": m, "aten_GBps": aten}
            for name, isa in kernels.ISAS.items():
                if isa <= best:
                    row[f"{name}_GBps"] = rate(lambda: torch.ops.mtp_viz.rows(x, w, scale, None, isa), nbytes)
            rows.append(row)
            print(row, file=sys.stderr)
    m = machine.machine()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    result = {"machine": m, "machine_line": machine.line(m), "threads": args.threads, "N": N, "K": K,
              "stream_GBps": stream(torch), "rows": rows}
    (out / "kernel_bandwidth.json").write_text(json.dumps(result, indent=1), encoding="utf-8")
    isas = [n for n, i in kernels.ISAS.items() if i <= best]
    lines = [f"# The engine's kernel beside ATen: GB/s of weights read ({args.threads} thread(s))", "",
             f"{result['machine_line']}.", "",
             f"W {N} × {K}, medians of 15 calls; a plain streaming read of a 2 GB buffer: "
             f"{result['stream_GBps']:.1f} GB/s. Each ISA column is the same kernel capped to it "
             "(`MTP_VIZ_KERNEL_ISA`): what a CPU with only that instruction set runs.", "",
             "| weights | rows | ATen | " + " | ".join(isas) + " |", "|---|---|---|" + "---|" * len(isas)]
    for r in rows:
        lines.append(f"| {r['weights']} | {r['rows']} | {r['aten_GBps']:.1f} | "
                     + " | ".join(f"{r[n + '_GBps']:.1f}" for n in isas) + " |")
    (out / "kernel_bandwidth.md").write_text("\n".join(lines) + "\n", encoding="utf-8")
    print("\n".join(lines))
    return 0


def stream(torch) -> float:
    x = torch.ones(int(5e8), dtype=torch.float32)
    return rate(lambda: x.sum(), x.numel() * 4, repeats=5)


if __name__ == "__main__":
    sys.exit(main())
