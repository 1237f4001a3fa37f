"""A cost profile (:func:`mtp_viz.measure.profile.study`'s result) as a readable table.

Pure: a dict in, markdown, HTML or a plotly figure out. The markdown is what ``mtp-viz profile``
prints and writes as ``profile.md``; the HTML and the figure are the app's Measure tab's
(``#profile-result``, ``#profile-plot``): the same blocks (:func:`blocks`) in both.
"""
from __future__ import annotations

from typing import Any

from . import document
from .document import Block, Table

WAITING = "Press Profile: every forward's cost here, and the speedup it predicts."

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


def chosen(choice: dict[str, Any]) -> str:
    """Which precision the profile ran in and why (``meta.precision_choice``), one sentence
    and the machine's: ``This CPU has no native bfloat16 (AVX2): ...``."""
    best = choice["fastest"]
    how = {"machine": f"Precision {best}, the fastest on this machine (none was given).",
           "asked": f"Precision as asked; the fastest on this machine is {best}.",
           "default": f"Precision: the pair's usual default (float32 on a CPU, bfloat16 on a GPU); the fastest on "
                      f"this machine is {best} (--dtype {best})."}
    return f"{how[choice['chosen_by']]} {choice['why']}"


def _at(by_gamma: dict, g: int):
    """``by_gamma[g]``, its keys ints as made or strings as JSON read them back."""
    return by_gamma.get(g, by_gamma.get(str(g)))


def answer(target: str, engine: str, over: str, rows: list[dict[str, Any]] | None, draft_tokens: int,
           break_even: float | None) -> str:
    """The page's opening sentence for one engine: MTP's predicted speedup over ``over`` at the
    acceptance published for chat (:data:`mtp_viz.analysis.published.CHAT`, whose size it names)
    and the break-even α, at γ = ``draft_tokens``; "" without that figure's row."""
    from mtp_viz.analysis.published import CHAT
    row = next((r for r in rows or () if r.get("id") == CHAT), None)
    if row is None:
        return ""
    return (f"On this machine, {target.upper()} with its assistant on {engine}: MTP with {draft_tokens} drafts is "
            f"predicted ×{row['speedup_at_profile_draft_tokens']:.2f} over {over}, {row['label']} "
            f"(α {row['alpha']:.3f}); break-even at α = {_alpha(break_even)}.")


def blocks(result: dict[str, Any]) -> list[tuple[str, Any]]:
    """The profile as :mod:`.document` blocks: what :func:`markdown` and :func:`html` both
    render (one writer of its words)."""
    meta, fastest = result["meta"], result["fastest_plain"]
    out: list[Block] = [("h1", f"Cost profile: {meta.get('target', '?')}")]
    g = meta["draft_tokens"]
    for name, e in result["engines"].items():   # one sentence per engine: the answer first
        said = answer(meta.get("target", "?"), f"mtp-viz's {name} engine", "the fastest plain decoder here "
                      f"({fastest['engine']})", e.get("published"), g,
                      _at((e.get("prediction") or {}).get("break_even", {}), g))
        if said:
            out.append(("p", said))
    if meta.get("weights_label"):
        out.append(("p", f"{meta['weights_label']} ({meta.get('shape_origin', '')} shape)."))
    out += [("p", f"Machine: {meta.get('machine_line', '?')}."),
            ("p", f"{meta.get('precision', '')}; prompt {meta['prompt_tokens']} tokens; {meta['new_tokens']} new "
                  f"tokens per run; medians of {meta['repeats']} repeats on the {meta['clock']} clock; peak memory "
                  f"{meta['peak_memory_bytes'] / 1e9:.2f} GB."),
            *((("p", chosen(meta["precision_choice"])),) if meta.get("precision_choice") else ()),
            ("h2", "What each forward costs (ms)")]
    engines = result["engines"]
    widths = sorted({int(w) for e in engines.values() for w in e["costs"]["verify"]})
    rows = []
    for name, e in engines.items():
        c = e["costs"]
        rows.append((name, _ms(c["plain"]), *(_ms(c["verify"].get(str(w))) for w in widths), _ms(c["draft"]),
                     _ms(c["prefill_per_token"]), f"{c['compile_seconds']:.1f}"))
    out += [("table", Table(("engine", "plain step", *(f"verify {w}" for w in widths), "one draft",
                             "prefill / token", "compile (s)"), tuple(rows))),
            ("p", f"Verify w: the target over w tokens (w − 1 drafts) with the state MTP reads. The fastest plain "
                  f"step: {fastest['engine']}, {_ms(fastest['step_seconds'])} ms; the fastest plain run: "
                  f"{fastest['run_engine']}, {fastest['run_tokens_per_second']:.2f} tokens/s.")]
    for name, e in engines.items():
        if "prediction" not in e:
            continue
        out += prediction(f"Predicted speedup over the fastest plain decoder: {name} engine", e["prediction"])
        if e.get("runs"):
            rows = [("plain", f"{e['plain_run']['tokens_per_second']:.2f}", *("–",) * 8)]
            for r in e["runs"]:
                rows.append((r["label"], f"{r['tokens_per_second']:.2f}", f"×{r['speedup']:.2f}",
                             f"×{r['predicted']:.2f}", f"{r['measured_over_predicted']:.2f}",
                             f"{r['realized_alpha']:.3f}", f"×{r['predicted_at_realized_alpha']:.2f}",
                             f"{r['speedup'] / r['predicted_at_realized_alpha']:.2f}", f"{r['acceptance']:.1%}",
                             "yes" if r["same_tokens"] else "NO"))
            out += [("h2", f"Measured end to end: {name} engine, γ = {meta['draft_tokens']}"),
                    ("table", Table(("run", "tokens/s", "speedup over the fastest plain run", "predicted",
                                     "measured ÷ predicted", "α the draws gave", "predicted at it",
                                     "measured ÷ predicted at it", "drafts kept", "same tokens as plain"),
                                    tuple(rows)))]
            if not all(r["same_tokens"] for r in e["runs"]):
                out.append(("p", PARTED))
        out += at_published(name, e.get("published"), meta["draft_tokens"], result.get("published") or {})
    own = result.get("own_acceptance")
    if own:
        out.append(("p", f"The pair's own drafter on this prompt: α = {own['alpha']:.3f} (maximum likelihood), "
                         f"τ = {own['tau']:.2f} tokens per target forward, at γ = {own['draft_tokens']}."))
    elif meta.get("weights_label"):
        out.append(("p", "The pair's own acceptance is not measured: its weights are random, so its drafts are noise."))
    return out + by_precision(result.get("precisions"))


def prediction(title: str, pred: dict[str, Any]) -> list[Block]:
    """:func:`mtp_viz.analysis.payoff.curves`' result as a table: the predicted speedup for
    each γ at a few α, its break-even α, and the best γ at each."""
    show = [a for a in (0.3, 0.5, 0.6, 0.7, 0.8, 0.9) if a in pred["alphas"]]
    rows = []
    for g, row in pred["speedup"].items():
        by_alpha = dict(zip(pred["alphas"], row))
        rows.append((str(g), _alpha(pred["break_even"][g]), *(f"×{by_alpha[a]:.2f}" for a in show)))
    at = {float(a): gs for a, gs in pred["best"].items()}   # float keys, or their JSON strings
    best = [f"α {a:g}: γ* = {at[a][0]} (×{at[a][1]:.2f})" for a in show]
    return [("h2", title), ("table", Table(("γ", "break-even α", *(f"α = {a:g}" for a in show)), tuple(rows))),
            ("p", "Best draft length: " + "; ".join(best) + ".")]


def peer_blocks(result: dict[str, Any]) -> list[Block]:
    """A peer engine's profile (:func:`mtp_viz.measure.llamacpp_profile.study`'s result, with
    its ``meta``) as blocks: its costs, its prediction over its own plain decoding, and the MTP
    runs it measured beside their predictions."""
    meta, c, name = result["meta"], result["costs"], result["engine"]
    widths = sorted(int(w) for w in c["verify"])
    g = meta["draft_tokens"]
    said = answer(meta.get("target", "?"), name, f"{name}'s own plain decoding", result.get("published"), g,
                  _at(result["prediction"]["break_even"], g))
    out: list[Block] = [
        ("h1", f"Cost profile on {name}: {meta.get('target', '?')}"),
        *((("p", said),) if said else ()),
        ("p", f"Machine: {meta.get('machine_line', '?')}; {result['threads']} thread(s); llama-server "
              f"{meta.get('server_build') or '(version not given)'}."),
        ("p", f"Weights: the {meta.get('gguf_type', '?')} GGUF `mtp-viz gguf` exported"
              + (" (random weights: timings only)" if meta.get("weights") == "random" else "")
              + f"; prompt {meta['prompt_tokens']} token ids; {meta['new_tokens']} new tokens per run; medians of "
              f"{meta['repeats']} repeats on {meta['clock']} clock."),
        ("h2", "What each forward costs (ms)"),
        ("table", Table(("engine", "plain step", *(f"verify {w}" for w in widths), "one draft"),
                        ((name, _ms(c["plain"]), *(_ms(c["verify"][str(w)]) for w in widths), _ms(c["draft"])),))),
        ("p", f"Verify w: w new tokens after a cached prefix (the server's prompt processing); one draft: by "
              f"difference, from MTP runs drafting {c['calibrate_drafts']} a step (a step's cost less the "
              f"verification of {c['calibrate_drafts'] + 1}, over {c['calibrate_drafts']})."),
        *prediction(f"Predicted speedup over {name}'s own plain decoding", result["prediction"])]
    rows = [(k["label"], str(k["draft_tokens"]), f"{k['decode_tokens_per_second']:.2f}", f"×{k['measured']:.2f}",
             f"{k['realized_alpha']:.3f}", f"{k['tau']:.2f}", f"×{k['predicted']:.2f}",
             f"{k['measured_over_predicted']:.2f}") for k in result["checks"]]
    out += [("h2", f"Measured on {name}: MTP beside its plain decoding ({result['plain_decode_tokens_per_second']:.2f} "
                   "tokens/s)"),
            ("table", Table(("run", "γ", "decode tokens/s", "speedup over plain", "α the run gave", "τ",
                             "predicted at it", "measured ÷ predicted"), tuple(rows))),
            ("p", "Decode rates are the server's own (prompt left out, as the prediction leaves it out). Set "
                  "acceptance: llama.cpp's synthetic acceptance (--spec-synth-rates α, α², …): every forward "
                  "real, each draft kept with probability α, its text not the model's. Its own drafter: the "
                  "exported pair's (with random weights its drafts are rejected: the cost side alone).")]
    return out


def peer_markdown(result: dict[str, Any]) -> str:
    """A peer engine's profile as markdown (``mtp-viz profile --engine llama.cpp``'s profile.md)."""
    return document.markdown(peer_blocks(result))


def _figure(r: dict[str, Any]) -> str:
    return f"τ {r['value']:g}" if r["kind"] == "tau" else f"{r['value']:g} of drafts accepted"


def at_published(engine: str, rows: list[dict[str, Any]] | None, draft_tokens: int,
                 table: dict[str, Any]) -> list[Block]:
    """The predicted speedup at each published acceptance (``engines.<engine>.published``, rows of
    :func:`mtp_viz.analysis.published.rows`): every row labelled with the size it was published
    for, its α, the speedup at the profile's γ and at the figure's own, and a short citation;
    then which rows are the profiled pair's own size, and the table's notes. None without rows."""
    if not rows:
        return []
    size = table.get("model_size")
    body = tuple((r["label"], _figure(r), f"{r['alpha']:.3f}", f"×{r['speedup_at_profile_draft_tokens']:.2f}",
                  "–" if r["speedup_at_own_draft_tokens"] is None else f"×{r['speedup_at_own_draft_tokens']:.2f}",
                  "yes" if r["same_model"] else f"no: {r['model_size']}", r["source"]["where"]) for r in rows)
    own = (f"The profiled target is {size}: the rows marked yes were published for {size} (measured by others, on "
           f"their prompts and hardware); every other row is another size's acceptance, not this pair's." if size else
           "The profiled target is no Gemma 4 size: every row is the acceptance published for the size it "
           "names, not this pair's.")
    said = [f"{n['says']} Source: {n['source']['where']}." for n in table.get("notes", [])]
    return [("h2", f"Predicted speedup at published acceptances: {engine} engine"),
            ("table", Table(("published acceptance", "as published", "α", f"speedup at γ = {draft_tokens}",
                             "speedup at its own γ", "this pair's size", "source"), body)),
            ("p", f"{own} α: the per-token acceptance that gives each figure back at the γ it was measured at "
                  f"(τ: E(α, γ) = τ; drafts accepted ÷ drafted: (E(α, γ) − 1) / γ); the speedup at its own γ "
                  f"only where the profile timed that width (–: not timed). Each figure's setting and source: "
                  f"{table.get('doc', 'docs/published-acceptance.md')}." + "".join(f" {n}" for n in said))]


def _bytes(n: float | None) -> str:
    return "–" if n is None else f"{n / 1e9:.2f} GB" if n >= 1e9 else f"{n / 1e6:.1f} MB"


def by_precision(sweep: dict[str, Any] | None) -> list[Block]:
    """``--precisions``' table (:func:`mtp_viz.measure.precisions.sweep`'s result): each
    precision's plain step on each engine, the fastest measured marked, beside the machine's
    fastest precision and why; none without it."""
    if not sweep:
        return []
    w, rows = sweep["draft_tokens"] + 1, []
    for r in sweep["rows"]:
        tps = "–" if r["tokens_per_second"] is None else f"{r['tokens_per_second']:.1f}"
        gbs = "–" if r["weight_gb_per_second"] is None else f"{r['weight_gb_per_second']:.1f}"
        note = r["refused"] or ("fastest measured" if r["fastest"] else "")
        rows.append((r["precision"], r["engine"] or "–", _ms(r["plain_seconds"]), tps, _ms(r["verify_seconds"]),
                     _ms(r["draft_seconds"]), _ms(r["prefill_per_token_seconds"]), _bytes(r["step_weight_bytes"]),
                     gbs, note))
    best, top = sweep["fastest"], sweep["fastest_measured"]
    said = f"{best['why']} "
    if top is None:
        said += "No precision could be timed here."
    else:
        said += (f"Fastest measured: {top['precision']} on the {top['engine']} engine, {_ms(top['plain_seconds'])} "
                 f"ms a plain step ({top['tokens_per_second']:.1f} tokens/s)"
                 + (", as predicted." if top["precision"] == best["precision"] else
                    f"; the machine's predicted fastest is {best['precision']}."))
    return [("h2", "Plain step by precision"),
            ("table", Table(("precision", "engine", "plain step (ms)", "tokens/s", f"verify {w} (ms)",
                             "one draft (ms)", "prefill / token (ms)", "weights a step reads", "GB/s", "note"),
                            tuple(rows))),
            ("p", f"Each precision is the whole pair loaded in it, alone (one pair resident at a time), timed as "
                  f"above: medians of {sweep['repeats']} repeats on the {sweep['clock']} clock, a prompt of "
                  f"{sweep['prompt_tokens']} tokens; tokens/s is 1 ÷ the plain step; verify {w}: the target over "
                  f"{w} tokens (γ = {w - 1}); weights a step reads: the target's parameters as stored but its "
                  f"embedding tables, of which a step reads one row; GB/s: those bytes ÷ the plain step."),
            ("p", said)]


def markdown(result: dict[str, Any]) -> str:
    """The profile as markdown: what ``mtp-viz profile`` prints and writes as ``profile.md``."""
    return document.markdown(blocks(result))


def html(result: dict[str, Any]) -> str:
    """The same blocks as escaped HTML (``#profile-result`` on the app's Measure tab)."""
    return f'<div class="mv-profile-result">{document.html(blocks(result), "mv-profile")}</div>'


def figure(result: dict[str, Any] | None):
    """The predicted speedup over the fastest plain decoder against acceptance α, one
    curve per draft length γ, the break-even line at ×1, the published acceptance for chat
    and for the profiled size marked at their α, and the runs measured at a set acceptance as
    points at the α their draws gave (plotly; empty before a profile)."""
    import plotly.graph_objects as go
    layout = dict(title=dict(text="Predicted speedup over the fastest plain decoder", x=0.01, xanchor="left",
                             font=dict(size=14)),
                  height=320, margin=dict(l=56, r=12, t=40, b=48), template="none",
                  legend=dict(orientation="h", y=-0.2), xaxis=dict(title=dict(text="acceptance α per draft"),
                                                                   range=[0, 1]),
                  yaxis=dict(title=dict(text="× the fastest plain decoder")),
                  shapes=[dict(type="line", xref="paper", x0=0, x1=1, y0=1, y1=1,
                               line=dict(color="#9ca3af", dash="dash"))])
    engine = next((e for e in (result or {}).get("engines", {}).values() if "prediction" in e), None)
    if engine is None:
        layout.update(shapes=[], annotations=[dict(text=WAITING, showarrow=False, xref="paper", yref="paper",
                                                   x=0.5, y=0.5, font=dict(size=13, color="#6b7280"))])
        layout["xaxis"]["visible"] = layout["yaxis"]["visible"] = False
        return go.Figure(data=[], layout=layout, _validate=False)
    pred = engine["prediction"]
    data = [dict(type="scatter", mode="lines", x=pred["alphas"], y=row, name=f"γ = {g}",
                 hovertemplate=f"γ = {g}, α %{{x:.2f}}: ×%{{y:.2f}}<extra></extra>")
            for g, row in pred["speedup"].items()]
    # the published acceptances a reader compares with: the chat figure and the profiled size's own,
    # each a dotted line at its α, labelled with the size it was published for
    from mtp_viz.analysis.published import CHAT
    marks = [r for r in engine.get("published") or () if r.get("id") == CHAT or r.get("same_model")]
    layout["shapes"] += [dict(type="line", yref="paper", x0=r["alpha"], x1=r["alpha"], y0=0, y1=1,
                              line=dict(color="#6b7280", dash="dot", width=1)) for r in marks]
    layout["annotations"] = [dict(text=f"{r['model_size']} {r['task']}", x=r["alpha"], yref="paper", y=1 - 0.07 * i,
                                  showarrow=False, xanchor="right", font=dict(size=10, color="#6b7280"))
                             for i, r in enumerate(marks)]
    runs = engine.get("runs") or []
    if runs:
        data.append(dict(type="scatter", mode="markers", x=[r["realized_alpha"] for r in runs],
                         y=[r["speedup"] for r in runs], name=f"measured, γ = {result['meta']['draft_tokens']}",
                         marker=dict(size=10, color="#111827", symbol="diamond"),
                         hovertemplate="measured at α %{x:.3f}: ×%{y:.2f}<extra></extra>"))
    return go.Figure(data=data, layout=layout, _validate=False)


__all__ = ["answer", "at_published", "blocks", "by_precision", "chosen", "figure", "html", "markdown", "peer_blocks",
           "peer_markdown", "prediction"]
