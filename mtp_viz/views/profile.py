"""A cost profile (:func:`mtp_viz.measure.profile.study`'s result) as a readable table.

Pure: a dict in, markdown out. The same table is what ``mtp-viz profile`` prints and writes
as ``profile.md``.
"""
from __future__ import annotations

from typing import Any


PARTED = ("A speculative run's greedy path parted from the plain run's: this precision rounds a "
          "verification of several tokens otherwise than a plain step, and where the target's top two "
          "tokens are that close the argmax changes. A set acceptance proposes the plain run's tokens, "
          "so after the parting its drafts cannot be right and the α the draws gave falls below the set "
          "one; the prediction at that α is the check. A random target's logits are flat, so it parts "
          "often in bfloat16; profile it in float32 (--dtype float32) for runs at the set acceptance.")


def _ms(s: float | None) -> str:
    return "–" if s is None else f"{s * 1e3:.2f}"


def _alpha(a: float | None) -> str:
    return "never" if a is None else f"{a:.2f}"


def markdown(result: dict[str, Any]) -> str:
    meta, fastest = result["meta"], result["fastest_plain"]
    lines = [f"# Cost profile: {meta.get('target', '?')}", ""]
    if meta.get("weights_label"):
        lines += [f"**{meta['weights_label']}** ({meta.get('shape_origin', '')} shape).", ""]
    lines += [f"Machine: {meta.get('machine_line', '?')}.", "",
              f"{meta.get('precision', '')}; prompt {meta['prompt_tokens']} tokens; {meta['new_tokens']} new tokens "
              f"per run; medians of {meta['repeats']} repeats on the {meta['clock']} clock; peak memory "
              f"{meta['peak_memory_bytes'] / 1e9:.2f} GB.", "", "## What each forward costs (ms)", ""]
    engines = result["engines"]
    widths = sorted({int(w) for e in engines.values() for w in e["costs"]["verify"]})
    lines.append("| engine | plain step | " + " | ".join(f"verify {w}" for w in widths)
                 + " | one draft | prefill / token | compile (s) |")
    lines.append("|---" * (len(widths) + 5) + "|")
    for name, e in engines.items():
        c = e["costs"]
        lines.append(f"| {name} | {_ms(c['plain'])} | " + " | ".join(_ms(c["verify"].get(str(w))) for w in widths)
                     + f" | {_ms(c['draft'])} | {_ms(c['prefill_per_token'])} | {c['compile_seconds']:.1f} |")
    lines += ["", f"Verify w: the target over w tokens (w − 1 drafts) with the state MTP reads. The fastest plain "
              f"step: {fastest['engine']}, {_ms(fastest['step_seconds'])} ms; the fastest plain run: "
              f"{fastest['run_engine']}, {fastest['run_tokens_per_second']:.2f} tokens/s.", ""]
    for name, e in engines.items():
        if "prediction" not in e:
            continue
        pred = e["prediction"]
        show = [a for a in (0.3, 0.5, 0.6, 0.7, 0.8, 0.9) if a in pred["alphas"]]
        lines += [f"## Predicted speedup over the fastest plain decoder: {name} engine", "",
                  "| γ | break-even α | " + " | ".join(f"α = {a:g}" for a in show) + " |",
                  "|---" * (len(show) + 2) + "|"]
        for g, row in pred["speedup"].items():
            by_alpha = dict(zip(pred["alphas"], row))
            lines.append(f"| {g} | {_alpha(pred['break_even'][g])} | "
                         + " | ".join(f"×{by_alpha[a]:.2f}" for a in show) + " |")
        at = {float(a): gs for a, gs in pred["best"].items()}   # float keys, or their JSON strings
        best = [f"α {a:g}: γ* = {at[a][0]} (×{at[a][1]:.2f})" for a in show]
        lines += ["", "Best draft length: " + "; ".join(best) + ".", ""]
        if e.get("runs"):
            lines += [f"## Measured end to end: {name} engine, γ = {meta['draft_tokens']}", "",
                      "| run | tokens/s | speedup over the fastest plain run | predicted | measured ÷ predicted "
                      "| α the draws gave | predicted at it | measured ÷ predicted at it | drafts kept | same tokens as plain |",
                      "|---|---|---|---|---|---|---|---|---|---|",
                      f"| plain | {e['plain_run']['tokens_per_second']:.2f} | – | – | – | – | – | – | – | – |"]
            for r in e["runs"]:
                lines.append(f"| {r['label']} | {r['tokens_per_second']:.2f} | ×{r['speedup']:.2f} | "
                             f"×{r['predicted']:.2f} | {r['measured_over_predicted']:.2f} | "
                             f"{r['realized_alpha']:.3f} | ×{r['predicted_at_realized_alpha']:.2f} | "
                             f"{r['speedup'] / r['predicted_at_realized_alpha']:.2f} | "
                             f"{r['acceptance']:.1%} | {'yes' if r['same_tokens'] else 'NO'} |")
            lines.append("")
            if not all(r["same_tokens"] for r in e["runs"]):
                lines += [PARTED, ""]
    own = result.get("own_acceptance")
    if own:
        lines += [f"The pair's own drafter on this prompt: α = {own['alpha']:.3f} (maximum likelihood), "
                  f"τ = {own['tau']:.2f} tokens per target forward, at γ = {own['gamma']}.", ""]
    elif meta.get("weights_label"):
        lines += ["The pair's own acceptance is not measured: its weights are random, so its drafts are noise.", ""]
    return "\n".join(lines)


__all__ = ["markdown"]
