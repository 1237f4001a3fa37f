"""Why the 26B-A4B may not speed up: what verifying γ drafts costs a mixture of experts.

Google's guide warns that in a mixture-of-experts target each verified token may route to
different experts, so a verification may read expert weights one plain step would not
need. This script measures it on this machine with small random Gemma 4 targets built
from configs (no download), the 26B-A4B's text model in miniature:

- ``moe``: 6 layers of width 512, each with its dense MLP (width 512) and 16 experts of
  width 256, top-2 per token (Gemma 4's MoE block keeps the dense MLP beside the experts:
  ``Gemma4TextDecoderLayer`` adds the two outputs);
- ``dense``: the same model without experts, its MLP as wide as what one token of
  ``moe`` uses: 512 + 2 × 256 = 1024. Same width, layers, attention and vocabulary: the
  same active parameters per token.

For γ = 1..8, at the same context (a 64-token random prompt, prefilled once):

    v(γ) = t(one target forward over γ + 1 new tokens, γ + 1 logits kept)
           ÷ t(one target forward over 1 new token, 1 logit kept)

both through the engine's own eager decoder (``mtp_viz.engine.decoder``) on its cache, rolled back after each
forward, so every forward sees the same context. This is the bench's v (one
verification forward ÷ one autoregressive step; see mtp_viz/analysis/metrics.py). The
plain step and the verification of each pair run back to back, in alternating order;
models and draft lengths rotate from repeat to repeat; each ratio is a median over
prompts × repeats, timed on the thread's CPU clock (the engine's own clock on a CPU with
one thread) and on the wall clock. One torch thread.

The distinct experts per layer of each verification come from an untimed forward with
the engine's own counter (:class:`mtp_viz.engine.experts.ExpertTap`), beside what a
router that spread tokens uniformly would give, E·(1 − (1 − k/E)^(γ+1)). Random routers
are close to that: a random model is the worst case for overlap; a trained router sends
neighbouring tokens of real text to shared experts more often.

    python benchmarks/moe_experts.py                       # results/moe/moe_experts.{json,md}
    python benchmarks/moe_experts.py --repeats 3 --prompts 2 --out /tmp/moe   # a smoke run
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

import torch
from transformers import Gemma4ForCausalLM, Gemma4TextConfig

from mtp_viz.engine import theory
from mtp_viz.engine.decoder import EagerDecoder
from mtp_viz.engine.experts import ExpertTap

ROOT = Path(__file__).resolve().parent.parent
GAMMAS = tuple(range(1, 9))
WIDTH, LAYERS, VOCAB = 512, 6, 8192
MLP, EXPERTS, TOP_K, EXPERT_WIDTH = 512, 16, 2, 256
BASE = dict(vocab_size=VOCAB, hidden_size=WIDTH, num_hidden_layers=LAYERS, num_attention_heads=8,
            num_key_value_heads=2, head_dim=64, global_head_dim=64, vocab_size_per_layer_input=0,
            hidden_size_per_layer_input=0, sliding_window=128,
            layer_types=["sliding_attention"] * (LAYERS - 1) + ["full_attention"], max_position_embeddings=4096,
            pad_token_id=0, eos_token_id=1, bos_token_id=2)
MOE = dict(intermediate_size=MLP, enable_moe_block=True, num_experts=EXPERTS, top_k_experts=TOP_K,
           moe_intermediate_size=EXPERT_WIDTH)
DENSE = dict(intermediate_size=MLP + TOP_K * EXPERT_WIDTH)
ALPHA, C = 0.8, 0.1  # an illustration of what v does to the speedup (the bundled pair: α ≈ 0.77, c ≈ 0.09)


def build(name: str, seed: int = 0):
    """``moe`` (transformers' default experts kernel), ``moe-eager`` (its per-expert loop)
    or ``dense``, random weights from a fixed seed."""
    extra = {"moe": MOE, "moe-eager": {**MOE, "experts_implementation": "eager"}, "dense": DENSE}[name]
    torch.manual_seed(seed)
    return Gemma4ForCausalLM(Gemma4TextConfig(**BASE, **extra)).eval()


def active_params(model) -> int:
    """Parameters one token uses: all of them, less the experts its router did not pick."""
    total = sum(p.numel() for p in model.parameters())
    cfg = model.config
    if not cfg.enable_moe_block:
        return total
    unused = (cfg.num_experts - cfg.top_k_experts) * 3 * cfg.hidden_size * cfg.moe_intermediate_size
    return total - cfg.num_hidden_layers * unused


def timed(kv, tokens: list[int]) -> tuple[float, float]:
    """(CPU seconds of this thread, wall seconds) of one forward; the cache rolled back."""
    cpu, wall = time.thread_time(), time.perf_counter()
    kv.forward(tokens, False, keep=len(tokens))
    cpu, wall = time.thread_time() - cpu, time.perf_counter() - wall
    kv.crop(len(tokens))
    return cpu, wall


def counted(model, kv, tokens: list[int]) -> tuple[int, ...]:
    """Distinct experts per layer of one forward over ``tokens`` (untimed); the cache rolled back."""
    tap = ExpertTap(model)
    tap.arm()
    kv.forward(tokens, False, keep=1)
    kv.crop(len(tokens))
    return tap.take()


def uniform(draft_tokens: int) -> float:
    """Expected distinct experts of γ + 1 tokens, each sent to top-k of E uniformly at random."""
    return EXPERTS * (1 - (1 - TOP_K / EXPERTS) ** (draft_tokens + 1))


def measure(models: dict, prompts: list[list[int]], drafts: list[list[int]], repeats: int) -> dict:
    """Per model and γ: the v ratios (cpu, wall), the plain step's seconds, the expert counts."""
    out = {name: {g: {"cpu": [], "wall": [], "plain_ms": [], "experts": []} for g in GAMMAS} for name in models}
    names = list(models)
    for p, (prompt, draft) in enumerate(zip(prompts, drafts)):
        caches = {}
        for name, model in models.items():
            caches[name] = EagerDecoder(model).open(len(prompt) + max(GAMMAS) + 1)
            caches[name].forward(prompt[:-1], False, keep=1)  # the context, prefilled once
        last = prompt[-1]
        for name, model in models.items():
            if model.config.enable_moe_block:
                for g in GAMMAS:
                    out[name][g]["experts"].append(counted(model, caches[name], [last] + draft[:g]))
        for r in range(repeats):
            turn = p * repeats + r
            for name in names[turn % len(names):] + names[:turn % len(names)]:
                for g in GAMMAS[turn % len(GAMMAS):] + GAMMAS[:turn % len(GAMMAS)]:
                    first, second = ([last], [last] + draft[:g]) if turn % 2 == 0 else ([last] + draft[:g], [last])
                    a, b = timed(caches[name], first), timed(caches[name], second)
                    plain, verify = (a, b) if turn % 2 == 0 else (b, a)
                    cell = out[name][g]
                    cell["cpu"].append(verify[0] / plain[0])
                    cell["wall"].append(verify[1] / plain[1])
                    cell["plain_ms"].append(1000 * plain[0])
        print(f"prompt {p + 1}/{len(prompts)} done", flush=True)
    return out


def rows(out: dict) -> list[dict]:
    table = []
    for name, cells in out.items():
        for g, cell in cells.items():
            counts = [n for per_layer in cell["experts"] for n in per_layer]
            v = statistics.median(cell["cpu"])
            table.append({
                "model": name, "draft_tokens": g, "v_cpu": v, "v_cpu_q1": _quantile(cell["cpu"], 0.25),
                "v_cpu_q3": _quantile(cell["cpu"], 0.75), "v_wall": statistics.median(cell["wall"]),
                "plain_ms": statistics.median(cell["plain_ms"]), "runs": len(cell["cpu"]),
                "experts_mean": statistics.fmean(counts) if counts else None,
                "experts_min": min(counts) if counts else None, "experts_max": max(counts) if counts else None,
                "experts_uniform": uniform(g) if counts else None,
                "speedup_illustration": theory.expected_tokens(ALPHA, g) / (g * C + v)})
    return table


def _quantile(values: list[float], q: float) -> float:
    return statistics.quantiles(values, n=4, method="inclusive")[int(q * 4) - 1]


def markdown(table: list[dict], meta: dict) -> str:
    models = "; ".join(f"`{name}`: {m['params'] / 1e6:.1f}M parameters, "
                       f"{m['active_params'] / 1e6:.1f}M active per token"
                       + (f", experts kernel `{m['experts_implementation']}`" if m["experts_implementation"] else "")
                       for name, m in meta["models"].items())
    lines = ["# Experts touched and the verification cost v (benchmarks/moe_experts.py)", "",
             f"v = one forward over γ+1 new tokens ÷ one forward over 1 new token, same context "
             f"({meta['context']} tokens), random weights. {models}.", "",
             f"Measured {meta['when']} on {meta['machine']}, torch {meta['torch']}, transformers "
             f"{meta['transformers']}, {meta['threads']} thread; load average {meta['load_before']} before, "
             f"{meta['load_after']} after. {meta['prompts']} prompts × {meta['repeats']} repeats per cell.", "",
             "| model | γ | v (CPU time, median) | v IQR | v (wall) | plain step ms | distinct experts per layer "
             "(mean, min–max) | uniform routing | ceiling | speedup at α=0.8, c=0.1 |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for r in table:
        experts = (f"{r['experts_mean']:.2f} ({r['experts_min']}–{r['experts_max']})" if r["experts_mean"] is not None
                   else "—")
        uni = f"{r['experts_uniform']:.2f}" if r["experts_uniform"] is not None else "—"
        ceiling = min(EXPERTS, TOP_K * (r["draft_tokens"] + 1)) if r["experts_mean"] is not None else "—"
        lines.append(f"| {r['model']} | {r['draft_tokens']} | {r['v_cpu']:.3f} | "
                     f"{r['v_cpu_q1']:.3f}–{r['v_cpu_q3']:.3f} | "
                     f"{r['v_wall']:.3f} | {r['plain_ms']:.2f} | {experts} | {uni} | {ceiling} | "
                     f"×{r['speedup_illustration']:.2f} |")
    return "\n".join(lines) + "\n"


def wait_for_quiet(max_load: float, patience: int) -> float:
    """Wait (at most ``patience`` seconds) for the 1-minute load average to fall below ``max_load``."""
    deadline = time.monotonic() + patience
    while os.getloadavg()[0] >= max_load and time.monotonic() < deadline:
        print(f"load average {os.getloadavg()[0]:.2f} ≥ {max_load}: waiting", flush=True)
        time.sleep(30)
    return os.getloadavg()[0]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--prompts", type=int, default=6)
    ap.add_argument("--repeats", type=int, default=15)
    ap.add_argument("--context", type=int, default=64, help="prompt tokens before each verification")
    ap.add_argument("--models", default="moe,moe-eager,dense")
    ap.add_argument("--max-load", type=float, default=1.3)
    ap.add_argument("--out", default=str(ROOT / "benchmarks/results/moe/moe_experts"))
    ap.add_argument("--markdown-only", action="store_true", help="rewrite the .md from the .json, measuring nothing")
    args = ap.parse_args(argv)
    if args.markdown_only:
        path = Path(args.out)
        data = json.loads(path.with_suffix(".json").read_text())
        path.with_suffix(".md").write_text(markdown(data["rows"], data["meta"]))
        return 0
    torch.set_num_threads(1)
    models = {name: build(name) for name in args.models.split(",")}
    gen = torch.Generator().manual_seed(1)
    prompts = [torch.randint(3, VOCAB, (args.context,), generator=gen).tolist() for _ in range(args.prompts)]
    drafts = [torch.randint(3, VOCAB, (max(GAMMAS),), generator=gen).tolist() for _ in range(args.prompts)]
    for name, model in models.items():  # warm up every shape once, untimed
        kv = EagerDecoder(model).open(2 * len(prompts[0]))
        kv.forward(prompts[0], False, keep=1)
        for g in (0,) + GAMMAS:
            timed(kv, prompts[0][:g + 1])
    load_before = wait_for_quiet(args.max_load, patience=1800)
    out = measure(models, prompts, drafts, args.repeats)
    meta = {"when": time.strftime("%Y-%m-%d %H:%M"), "machine": f"{os.cpu_count()}-core CPU (shared)",
            "torch": torch.__version__, "transformers": __import__("transformers").__version__,
            "threads": torch.get_num_threads(), "load_before": round(load_before, 2),
            "load_after": round(os.getloadavg()[0], 2), "prompts": args.prompts, "repeats": args.repeats,
            "context": args.context, "alpha_illustration": ALPHA, "c_illustration": C,
            "models": {name: {"params": sum(p.numel() for p in m.parameters()), "active_params": active_params(m),
                              "experts_implementation": m.config._experts_implementation
                              if m.config.enable_moe_block else None, "config": m.config.to_diff_dict()}
                       for name, m in models.items()}}
    table = rows(out)
    path = Path(args.out)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.with_suffix(".json").write_text(json.dumps({"meta": meta, "rows": table}, indent=1, default=str) + "\n")
    path.with_suffix(".md").write_text(markdown(table, meta))
    print(markdown(table, meta))
    return 0


if __name__ == "__main__":
    sys.exit(main())
