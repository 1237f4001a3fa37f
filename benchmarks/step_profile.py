"""Where one plain step of the bundled pair goes on this CPU, eager and compiled, at one
thread (issue 40: the compiled engine's speed did not carry over between CPUs).

For each engine: greedy plain decoding of 64 tokens after an untimed warm-up, its tokens/s
on the engine's own clock (median of --repeats); then one profiled run (torch.profiler,
CPU), whose aten operators are listed by self time, and the matrix products it recorded
replayed alone, with their shapes, in a tight loop: what the products alone cost per step
on this CPU's BLAS, against the step's whole time. The compiled engine runs its linear
layers inside the graph (``engine.static.StreamedLinear``), so for it the products alone
are the twin's linear layers, each over its own weights at one row, in one compiled graph
of their own; and the graph's call is read from the profile. The rest is the graph's other
kernels, dynamo's guards and bytecode, and the loop. Run alone on a quiet machine:

    .venv/bin/python benchmarks/step_profile.py --out benchmarks/results/step-profile
"""
from __future__ import annotations

import argparse
import json
import statistics
import time
from collections import Counter
from pathlib import Path

import torch

PROMPT = "def parse(line):\n    fields = []\n"
MATMULS = ("aten::mm", "aten::addmm", "aten::bmm", "aten::linear", "aten::matmul")


def decode(pair, n: int):
    events = list(pair.generate(PROMPT, mode="autoregressive", max_new_tokens=n, chat=False))
    return events[-1]


def products(prof) -> Counter:
    """(op, shapes) -> calls, for the products with no product below them (what BLAS runs)."""
    found = Counter()
    for e in prof.events():
        if e.name in ("aten::mm", "aten::addmm", "aten::bmm") and e.input_shapes:
            found[(e.name, tuple(tuple(s) for s in e.input_shapes if s))] += 1
    return found


def replay(found: Counter, steps: int, repeats: int = 5) -> float:
    """Seconds per step of the recorded products alone, each at its shape, float32."""
    calls = []
    for (name, shapes), count in found.items():
        ts = [torch.randn(*s) for s in shapes[:3]]
        fn = {"aten::mm": lambda a, b, *_: torch.mm(a, b), "aten::bmm": lambda a, b, *_: torch.bmm(a, b),
              "aten::addmm": lambda c, a, b: torch.addmm(c, a, b)}[name]
        calls.append((fn, ts, count / steps))
    best = []
    for _ in range(repeats):
        t = time.perf_counter()
        for fn, ts, per_step in calls:
            for _ in range(max(1, round(per_step * 50))):
                fn(*ts)
        best.append((time.perf_counter() - t) / 50)
    return statistics.median(best)


def streamed(fast, repeats: int = 5) -> float:
    """Seconds per step of the compiled twin's linear layers alone: each over its own
    weights at one row, in one compiled graph (C++ wrapper, as the engine's)."""
    from mtp_viz.engine.static import StreamedLinear
    layers = [m for m in fast.twin.modules() if isinstance(m, StreamedLinear)]
    xs = [torch.randn(1, m.in_features, dtype=m.weight.dtype) for m in layers]

    def run(*xs):
        return [m(x) for m, x in zip(layers, xs)]
    graph = torch.compile(run, fullgraph=True, dynamic=False, options={"cpp_wrapper": True})
    with torch.inference_mode():
        graph(*xs)
        best = []
        for _ in range(repeats):
            t = time.perf_counter()
            for _ in range(50):
                graph(*xs)
            best.append((time.perf_counter() - t) / 50)
    return statistics.median(best)


def graph_call(prof, steps: int) -> float | None:
    """Seconds per step inside the compiled graphs' calls (the profile's "Call CompiledFxGraph")."""
    total = sum(e.self_cpu_time_total for e in prof.key_averages() if e.key.startswith("## Call CompiledFxGraph"))
    return total / 1e6 / steps if total else None


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--new-tokens", type=int, default=64)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--out", default="benchmarks/results/step-profile")
    ap.add_argument("--products", choices=("streamed", "blas"), default="streamed",
                    help="blas: the compiled twin's linear layers call BLAS as nn.Linear does (the "
                         "engine before StreamedLinear), for an A/B of the two in alternating processes")
    args = ap.parse_args()
    torch.set_num_threads(1)
    from mtp_viz.measure import machine
    from mtp_viz.sources.models import load_pair
    if args.products == "blas":
        from mtp_viz.engine.static import StreamedLinear
        StreamedLinear.forward = torch.nn.Linear.forward
    eager = load_pair("tiny")
    t = time.perf_counter()
    compiled = eager.on("compiled", settings=())
    compile_s = time.perf_counter() - t
    result = {"machine": machine.line(machine.machine()), "new_tokens": args.new_tokens, "products": args.products,
              "compile_seconds_at_load": compile_s, "engines": {}}
    for name, pair in (("eager", eager), ("compiled", compiled)):
        decode(pair, args.new_tokens)   # warm-up (and any graph left to compile)
        rates = [decode(pair, args.new_tokens).tokens_per_second for _ in range(args.repeats)]
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU], record_shapes=True) as prof:
            done = decode(pair, args.new_tokens)
        steps = done.target_forwards
        table = prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=12)
        found = products(prof)
        fast = getattr(pair, "fast", None)
        alone = streamed(fast) if fast is not None else replay(found, steps)
        count = (sum(1 for m in fast.twin.modules() if hasattr(m, "in_features")) if fast
                 else sum(found.values()) / steps)
        in_graph = graph_call(prof, steps)
        step = 1 / statistics.median(rates)
        result["engines"][name] = {
            "tokens_per_second": statistics.median(rates), "repeats": rates, "step_ms": step * 1e3,
            "products_per_step": count, "products_alone_ms": alone * 1e3,
            "graph_call_ms": in_graph * 1e3 if in_graph else None,
            "rest_ms": (step - alone) * 1e3, "profile": table}
        print(f"{name}: {statistics.median(rates):.1f} tok/s ({step * 1e3:.2f} ms a token); "
              f"{count:.0f} products a step, alone {alone * 1e3:.2f} ms; "
              + (f"the graph's call {in_graph * 1e3:.2f} ms; " if in_graph else "")
              + f"the rest {(step - alone) * 1e3:.2f} ms", flush=True)
        print(table, flush=True)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "step_profile.json").write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
