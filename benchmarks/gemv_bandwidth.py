"""How fast torch reads weights in one matrix product here, against a plain read of the same
bytes: the bound a step of a real Gemma 4 shape decodes at (docs/real-scale.md).

    python benchmarks/gemv_bandwidth.py     # 1 torch thread; medians of 7
"""
import statistics
import time

import torch
import torch.nn.functional as F

torch.set_num_threads(1)


def med(fn, r=7):
    fn()
    ts = []
    for _ in range(r):
        t = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t)
    return statistics.median(ts)


W = torch.randn(262144, 1536).to(torch.bfloat16)   # the tied LM head: 805 MB, past every cache
x = torch.randn(1, 1536).to(torch.bfloat16)
x5 = torch.randn(5, 1536).to(torch.bfloat16)
b = W.numel()*2
s = med(lambda: W.sum())
l1 = med(lambda: F.linear(x, W))
l5 = med(lambda: F.linear(x5, W))
print(f"bf16 805 MB at 1 thread: sum {b/s/1e9:.1f} GB/s, linear 1 row {b/l1/1e9:.1f} GB/s ({l1*1e3:.1f} ms), "
      f"5 rows {b/l5/1e9:.1f} GB/s ({l5*1e3:.1f} ms)")
Wf = torch.randn(65536, 1536)
xf = torch.randn(1, 1536)
xf5 = torch.randn(5, 1536)
bf = Wf.numel()*4
l1 = med(lambda: F.linear(xf, Wf))
l5 = med(lambda: F.linear(xf5, Wf))
s = med(lambda: Wf.sum())
print(f"f32 403 MB at 1 thread: sum {bf/s/1e9:.1f} GB/s, linear 1 row {bf/l1/1e9:.1f} GB/s, "
      f"5 rows {bf/l5/1e9:.1f} GB/s")
