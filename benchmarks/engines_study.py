"""Does MTP pay off for E2B here, on each engine people run? One page from the profiles.

    python benchmarks/engines_study.py --ours DIR [--llama DIR ...] --out DIR

Reads ``profile.json`` of ``mtp-viz profile --engine compiled`` (ours: eager and compiled) and
of ``mtp-viz profile --engine llama.cpp --gguf …`` (one folder per GGUF type), all at the same
shape, machine and threads, and writes ``engines.md`` and ``engines.json``: one sentence per
engine (the predicted speedup of MTP over that engine's own plain decoding at γ = 4 at the
acceptance published for chat, its break-even α), the costs side by side, and llama.cpp's
measured MTP runs beside its predictions. The published acceptance is the table shipped with
the package (:mod:`mtp_viz.analysis.published`), each figure converted to α as it says.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
GAMMA = 4
CHAT = "vllm-e4b-mt-bench"     # the shipped figure read as "the acceptance published for chat" (published.CHAT)
CPU = "openwhispr-e2b-qat-cpu"  # and the one for E2B itself, on a CPU


def published(figure_id: str) -> tuple[float, str, str]:
    """(α, label, source) of a figure of the shipped table (mtp_viz/assets/acceptance/published.json)."""
    from mtp_viz.analysis import published as table
    f = next(f for f in table.load() if f.id == figure_id)
    return table.alpha(f), table.label(f), f"{f.source.where} ({f.source.link})"


def engines(ours: Path, llamas: list[Path]) -> dict[str, dict]:
    """engine label -> (plain, verify, draft) seconds and where they came from."""
    out = {}
    d = json.loads((ours / "profile.json").read_text(encoding="utf-8"))
    for name, e in d["engines"].items():
        c = e["costs"]
        out[f"mtp-viz {name} ({d['meta']['precision'].split(',')[0].replace('target ', '')})"] = {
            "plain": c["plain"], "verify": {int(w): s for w, s in c["verify"].items()}, "draft": c["draft"],
            "machine_line": d["meta"]["machine_line"], "checks": e.get("runs", [])}
    for folder in llamas:
        d = json.loads((folder / "profile.json").read_text(encoding="utf-8"))
        c = d["costs"]
        out[d["engine"]] = {"plain": c["plain"], "verify": {int(w): s for w, s in c["verify"].items()},
                            "draft": c["draft"], "machine_line": d["meta"]["machine_line"], "checks": d["checks"],
                            "server_build": d["meta"].get("server_build", "")}
    return out


def svg(curves: dict[str, list[tuple[float, float]]], marks: dict[str, float], gamma: int) -> str:
    """The predicted speedup over α, one line per engine, ×1 and the published α marked: a
    small SVG written here (no plotting library: the results folder opens anywhere)."""
    from html import escape
    w, h, left, top, right, bottom = 640, 380, 50, 20, 190, 40
    top_y = max(4.0, max(y for c in curves.values() for _, y in c))
    x = lambda a: left + a * (w - left - right)   # noqa: E731
    y = lambda s: top + (1 - s / top_y) * (h - top - bottom)   # noqa: E731
    colours = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b"]
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" font-family="sans-serif" '
           'font-size="11">', f'<rect width="{w}" height="{h}" fill="white"/>']
    for t in range(0, int(top_y) + 1):
        out.append(f'<line x1="{left}" x2="{x(1)}" y1="{y(t)}" y2="{y(t)}" stroke="#ddd"/>'
                   f'<text x="{left - 6}" y="{y(t) + 4}" text-anchor="end">×{t}</text>')
    for a in (0, 0.2, 0.4, 0.6, 0.8, 1.0):
        out.append(f'<text x="{x(a)}" y="{h - bottom + 16}" text-anchor="middle">{a:g}</text>')
    out.append(f'<text x="{x(0.5)}" y="{h - 6}" text-anchor="middle">per-token acceptance α (γ = {gamma})</text>')
    out.append(f'<line x1="{left}" x2="{x(1)}" y1="{y(1)}" y2="{y(1)}" stroke="black" stroke-dasharray="4 3"/>')
    for i, (name, a) in enumerate(marks.items()):
        out.append(f'<line x1="{x(a)}" x2="{x(a)}" y1="{top}" y2="{y(0)}" stroke="#888" stroke-dasharray="2 3"/>'
                   f'<text x="{x(a) + 3}" y="{top + 12 + 12 * i}" fill="#555">{escape(name)}</text>')
    for i, (name, c) in enumerate(curves.items()):
        col = colours[i % len(colours)]
        pts = " ".join(f"{x(a):.1f},{y(v):.1f}" for a, v in c)
        out.append(f'<polyline fill="none" stroke="{col}" stroke-width="2" points="{pts}"/>'
                   f'<text x="{x(1) + 8}" y="{top + 14 + 16 * i}" fill="{col}">{escape(name)}</text>')
    return "\n".join(out + ["</svg>"]) + "\n"


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--ours", required=True, help="a folder of `mtp-viz profile --engine compiled`")
    ap.add_argument("--llama", action="append", default=[], help="a folder of `mtp-viz profile --engine llama.cpp`")
    ap.add_argument("--target", default="e2b")
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    from mtp_viz.analysis import payoff
    from mtp_viz.engine import theory
    alpha, label, source = published(CHAT)
    cpu_alpha, cpu_label, cpu_source = published(CPU)
    found = engines(Path(args.ours), [Path(p) for p in args.llama])
    rows, sentences = {}, []
    for name, e in found.items():
        s = payoff.speedup(alpha, GAMMA, e["plain"], e["verify"], e["draft"])
        s_cpu = payoff.speedup(cpu_alpha, GAMMA, e["plain"], e["verify"], e["draft"])
        be = payoff.break_even(GAMMA, e["plain"], e["verify"], e["draft"])
        rows[name] = {**e, "speedup_at_chat": s, "speedup_at_e2b_cpu": s_cpu, "break_even": be}
        sentences.append(f"- over {name}'s own plain decoding ({e['plain'] * 1e3:.0f} ms a step): ×{s:.2f} "
                         f"(×{s_cpu:.2f} at the E2B figure); break-even at α = "
                         f"{'never' if be is None else f'{be:.2f}'}.")
    ours_best = min((e["plain"], n) for n, e in found.items() if n.startswith("mtp-viz"))
    # the fastest of ours with MTP, over every engine's plain step (the step a user of it pays)
    best = found[ours_best[1]]
    per_token = (GAMMA * best["draft"] + best["verify"][GAMMA + 1]) / theory.expected_tokens(alpha, GAMMA)
    across = [f"- {ours_best[1]} with MTP ({per_token * 1e3:.0f} ms a token at α {alpha:.3f}) over {n}'s plain "
              f"decoding: ×{e['plain'] / per_token:.2f}." for n, e in found.items()]
    lines = [f"# Does MTP pay off for {args.target.upper()} here? Each engine's answer", "",
             f"Machine: {next(iter(found.values()))['machine_line']}.", "",
             f"On this machine, {args.target.upper()} with its assistant (random weights at the real shape give "
             f"the costs; the acceptance is published, not the random pair's), MTP with {GAMMA} drafts is "
             f"predicted {label} (α {alpha:.3f}; in brackets, {cpu_label}, α {cpu_alpha:.3f}), as follows:",
             "", *sentences, "",
             "And across engines, at the chat figure:", "", *across, "",
             "![Predicted speedup over each engine's own plain decoding](engines.svg)", "",
             f"The fastest plain step of ours: {ours_best[1]}, {ours_best[0] * 1e3:.0f} ms. Sources: {source}; "
             f"{cpu_source}; conversions to α as docs/published-acceptance.md states them. The chat figure is "
             "E4B's, not E2B's own (Google published none).", "",
             "## What each forward costs (ms)", "",
             "| engine | plain step | " + " | ".join(f"verify {w}" for w in range(1, 10)) + " | one draft |",
             "|---|---|" + "---|" * 9 + "---|"]
    for name, e in found.items():
        lines.append(f"| {name} | {e['plain'] * 1e3:.1f} | "
                     + " | ".join(f"{e['verify'][w] * 1e3:.1f}" if w in e["verify"] else "–" for w in range(1, 10))
                     + f" | {e['draft'] * 1e3:.2f} |")
    lines += ["", "## Measured MTP runs beside their predictions", "",
              "| engine | run | measured | predicted at the α it gave | measured ÷ predicted |",
              "|---|---|---|---|---|"]
    for name, e in found.items():
        for k in e["checks"]:
            if "measured" in k:   # llama.cpp's: decode rates, the server's own
                lines.append(f"| {name} | {k['label']} (α {k['realized_alpha']:.2f}) | ×{k['measured']:.2f} | "
                             f"×{k['predicted']:.2f} | {k['measured_over_predicted']:.2f} |")
            else:                 # ours: whole runs over the fastest plain run
                lines.append(f"| {name} | {k['label']} (α {k['realized_alpha']:.2f}) | ×{k['speedup']:.2f} | "
                             f"×{k['predicted_at_realized_alpha']:.2f} | "
                             f"{k['speedup'] / k['predicted_at_realized_alpha']:.2f} |")
    lines += ["", "Costs: ours on the profile's clock (the engine thread's), llama.cpp's from its own timings; the "
                  "servers were started and stopped by `mtp-viz profile --engine llama.cpp`, one profile after "
                  "the other, nothing else running. "
                  "Ours: whole runs (prompt included) over the fastest plain run of ours, on the engine's clock. "
                  "llama.cpp's: decode rates from its own timings, over its own plain decoding; set acceptance "
                  "through its synthetic acceptance (every forward real)."]
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "engines.md").write_text("\n".join(lines) + "\n", encoding="utf-8")
    grid = [i / 50 for i in range(51)]
    curves = {n: [(a, payoff.speedup(a, GAMMA, e["plain"], e["verify"], e["draft"])) for a in grid]
              for n, e in found.items()}
    (out / "engines.svg").write_text(svg(curves, {"E4B chat (vLLM)": alpha, "E2B CPU (llama.cpp)": cpu_alpha},
                                         GAMMA), encoding="utf-8")
    (out / "engines.json").write_text(json.dumps({"chat": {"id": CHAT, "alpha": alpha, "label": label,
                                                           "source": source},
                                                  "e2b_cpu": {"id": CPU, "alpha": cpu_alpha, "label": cpu_label,
                                                              "source": cpu_source}, "gamma": GAMMA,
                                                  "engines": rows}, indent=1, default=str), encoding="utf-8")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
