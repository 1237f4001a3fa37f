"""A bench's result written as a table, JSON and an HTML report (the numbers are
:mod:`mtp_viz.measure.reduce`'s: pooled rates, medians over repeats, theory).

The output folder is checked before the first run (:func:`prepare_out`): a bench's results
already there are overwritten only with ``--force``, and a folder that cannot be written
is one sentence before any model loads. A write that fails anyway, after the run, puts
the results in a fresh temporary folder instead and says where (:func:`save`).
"""
from __future__ import annotations

import contextlib
import json
import os
import platform
import tempfile
from pathlib import Path
from typing import Any

from mtp_viz.errors import UserError, clip
from mtp_viz.views import document
from mtp_viz.views.document import Table

OUTPUTS = ("bench.json", "bench.md", "bench.html")   # what a bench writes in --out


def environment() -> dict[str, Any]:
    """What bench.json's meta says of where it ran: the versions, and the machine line
    (CPU model, ISA, cores and threads, BLAS, load: :mod:`mtp_viz.measure.machine`)."""
    import torch
    import transformers

    from mtp_viz.measure import machine
    m = machine.machine()
    return {"torch": torch.__version__, "transformers": transformers.__version__,
            "python": platform.python_version(), "machine": platform.machine(),
            "cpus": os.cpu_count(), "torch_threads": torch.get_num_threads(),
            "cuda": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
            "host": m, "machine_line": machine.line(m)}


def _f(x, fmt="{:.2f}", none="–"):
    return none if x is None else fmt.format(x)


CLOCKS = {"cpu": "on the engine thread's CPU clock (one torch thread: all of a run's work; waits for a core "
                  "left out)", "wall": "on wall time"}

COLUMNS = [
    ("setting", "setting", "{}"), ("tok/s", "tokens_per_second", "{:.1f}"),
    ("speedup", "speedup", "×{:.2f}"), ("call", "verdict", "{}"),
    ("vs fastest plain", "speedup_over_fastest_plain", "×{:.2f}"),
    ("decode", "decode_speedup", "×{:.2f}"),
    ("ref speedup", "reference_speedup", "×{:.2f}"),
    ("overhead vs ref", "overhead_vs_reference", "{:.3f}"),
    ("(cpu)", "overhead_vs_reference_cpu", "{:.3f}"),
    ("fwd (ref)", None, None), ("accept", "acceptance_rate", "{:.1%}"), ("α", "alpha", "{:.3f}"),
    ("τ (pred)", None, None), ("c", "cost_coefficient", "{:.3f}"),
    ("v", "verify_cost", "{:.2f}"), ("predicted", "predicted_speedup", "×{:.2f}"),
    ("meas/pred", "measured_over_predicted", "{:.2f}"),
    ("pred with v", "predicted_speedup_with_verify_cost", "×{:.2f}"), ("γ*", "optimal_draft_tokens", "{}"),
    ("parity", None, None),
]


# the terminal's table unless --wide: what answers "does it pay, and is it lossless?"
COMPACT = ("setting", "tok/s", "speedup", "call", "vs fastest plain", "α", "τ (pred)", "predicted", "meas/pred",
           "γ*", "parity")


def _columns(wide: bool) -> list[tuple]:
    return COLUMNS if wide else [c for c in COLUMNS if c[0] in COMPACT]


def _cells(row, columns=COLUMNS) -> list[str]:
    out = []
    for title, key, fmt in columns:
        if title == "fwd (ref)":
            out.append(f"{row['target_forwards']} ({_f(row['reference_target_forwards'], '{}')})")
        elif title == "τ (pred)":
            out.append(f"{_f(row.get('tau'))} "
                       f"({_f(row['tau_predicted'])})")
        elif title == "parity":
            out.append("–" if row["parity"] is None else
                       ("ok" if row["parity"] else f"FAIL ×{row['parity_failures']}"))
        else:
            out.append(_f(row.get(key), fmt))
    return out


def blocks(result, extra: list = (), wide: bool = True) -> list:
    """The report as :mod:`mtp_viz.views.document` blocks; ``extra`` blocks follow the main
    table (the table by precision pair, :func:`mtp_viz.cli.bench_precision.blocks`).
    ``wide=False``: the main table with the :data:`COMPACT` columns only (the terminal's,
    unless ``--wide``)."""
    columns = _columns(wide)
    m, ar = result["meta"], result["autoregressive"]
    pairs = m.get("precisions") or []
    several = (f"Precision pairs (target/drafter): {', '.join(pairs)}. Autoregressive, the first pair's "
               f"{pairs[0].split('/')[0]} target: ") if len(pairs) > 1 else "Autoregressive: "
    about = [f"{m['prompts']} prompts, {m['max_new_tokens']} new tokens, {m['repeats']} repeat(s), "
             f"temperature {m['temperature']}, stale_kv={m['stale_kv']}; torch {m['torch']}, "
             f"transformers {m['transformers']}, {m['cpus']} CPUs ({m['torch_threads']} threads)"
             + (f", {m['cuda']}" if m.get("cuda") else "") + ".",
             *([f"Machine: {m['machine_line']}."] if m.get("machine_line") else []),
             *([m["precision_note"]] if m.get("precision_note") else []),
             f"{several}{_f(ar['tokens_per_second'], '{:.1f}')} tok/s, "
             f"{ar['target_forwards']} target forwards, {_f(ar['step_seconds'] * 1e3, '{:.2f}')} ms per step."]
    out = [("h2", f"mtp-viz bench: {m['target']}" + (f" + {m['drafter']}" if m.get("drafter") else "")),
           ("p", "\n".join(about)),
           ("table", Table(tuple(t for t, _, _ in columns),
                           tuple(tuple(_cells(r, columns)) for r in result["settings"])))]
    if not wide:
        out.append(("p", f"({len(columns)} of {len(COLUMNS)} columns: bench.md and --wide have every one.)"))
    out += [("p", f"Timed {CLOCKS.get(m.get('clock'), 'on wall time')}, from the prefill to the last token, "
                  "after an untimed warm-up of each run: as the app's Run and Measure and a notebook time."),
            ("p", "speedup: tokens/s over autoregressive, end to end (median of repeats); call: faster or "
                  "slower when every repeat agrees, else too close to call (with one repeat, no call); decode: the "
                  "same without the prefill forward, which costs the same in every mode and is not part of "
                  "the theory; overhead: our wall time ÷ "
                  "transformers' (median of repeats; cpu: the same in process CPU time); fwd: target forwards; τ: "
                  "tokens per target forward after the prefill; "
                  "α: per-token acceptance (MLE); c: drafter step ÷ target step; v: one verification ÷ one "
                  "autoregressive step; predicted: (1−α^(γ+1))/((1−α)(γc+1)) (Leviathan et al.); meas/pred: decode "
                  "speedup ÷ predicted; pred with v: "
                  "the same with the measured verification cost, τ/(γc+v); γ*: best draft length for α, c.")]
    out += list(extra) + decoders(result)
    vs = [r["verify_cost"] for r in result["settings"] if r.get("verify_cost")]
    if result.get("verify_slope") is not None and vs:
        out.append(("p", f"One verification costs v = {min(vs):.2f}–{max(vs):.2f} autoregressive steps at these "
                         f"draft lengths; fitted over them it grows by {result['verify_slope']:.3f} steps per drafted "
                         "token (a least-squares slope, 0 when the fit falls; Leviathan et al. assume v = 1 at every "
                         "length)."))
    depth = max((len(r["per_position_conditional"]) for r in result["settings"]), default=0)
    if depth:
        rows = []
        for r in result["settings"]:
            cond, unc = r["per_position_conditional"], r["per_position_unconditional"]
            rows.append((r["setting"], *(f"{_f(cond[k], '{:.2f}')} / {_f(unc[k], '{:.2f}')}" if k < len(cond) else ""
                                         for k in range(depth))))
        out += [("h3", "Acceptance by draft position (conditional / unconditional)"),
                ("table", Table(("setting", *(str(k + 1) for k in range(depth))), tuple(rows)))]
    names = [r["setting"] for r in result["settings"]]
    rows = [(c["category"], *(f"{_f(c[n]['speedup'], '×{:.2f}')} / {_f(c[n]['alpha'], '{:.2f}')}" for n in names))
            for c in result["categories"]]
    out += [("h3", "By category (speedup / α)"), ("table", Table(("category", *names), tuple(rows)))]
    return out


def markdown(result, extra: list = (), wide: bool = True) -> str:
    """The report as markdown (``bench.md``; the terminal's with ``wide=False``)."""
    return document.markdown(blocks(result, extra, wide))


def decoders(result) -> list:
    """Every plain decoder and every peer of the run, each against the fastest plain decoder
    measured in it (bench.json's ``fastest_plain``), as blocks; none without one."""
    fast = result.get("fastest_plain")
    if not fast:
        return []
    rows = []
    for name, row in (result.get("autoregressive_by_precision") or {}).items():
        rows.append((f"mtp-viz {name}", "plain", _f(row["tokens_per_second"], "{:.1f}"), "–", "–", "–",
                     _f(row.get("speedup_over_fastest_plain"), "×{:.2f}"), "–"))
    for p in result.get("peers") or []:
        same = "–" if p["same_tokens_as_plain"] is None else ("yes" if p["same_tokens_as_plain"] else "NO")
        rows.append((p["peer"], p["setting"], _f(p["tokens_per_second"], "{:.1f}"),
                     _f(p["decode_tokens_per_second"], "{:.1f}"), _f(p["acceptance_rate"], "{:.1%}"),
                     _f(p["tau"], "{:.2f}"), _f(p["speedup_over_fastest_plain"], "×{:.2f}"), same))
    return [("h3", "Against the fastest plain decoder measured here"),
            ("p", f"Fastest plain decoder: {fast['decoder']}, {fast['tokens_per_second']:.1f} tok/s. Every row's "
                  "\"vs fastest plain\" is its tokens/s over that one's (medians of repeats, same prompts, same run)."),
            ("table", Table(("decoder", "setting", "tok/s", "decode tok/s", "accept", "τ", "vs fastest plain",
                             "same tokens"), tuple(rows)))]


def write(result, out: Path, extra: list = ()) -> tuple[list[Path], str | None]:
    """bench.json, bench.md and bench.html in ``out`` (see :func:`save`)."""
    return save(out, {"bench.json": json.dumps(result, indent=1, ensure_ascii=False) + "\n",
                      "bench.md": markdown(result, extra), "bench.html": html_report(result, extra)})


def prepare_out(out: Path, force: bool) -> list[Path]:
    """``--out`` checked before the first run: a folder (made now if missing) that takes
    a file, and without ``force`` none of a bench's results in it yet. Returns the
    folders this call made (deepest first), for :func:`discard` if the bench stops."""
    shown = clip(out)
    made: list[Path] = []
    if out.is_dir():
        held = [name for name in OUTPUTS if (out / name).exists()]
        if held and not force:
            raise UserError(f"--out {shown} already holds a bench's results ({', '.join(held)}); pass --force "
                            "to overwrite them, or choose another folder.")
    elif out.exists() or out.is_symlink():
        raise UserError(f"--out {shown} is a file, not a folder.")
    else:
        above = next((p for p in out.absolute().parents if p.exists()), None)
        if above is not None and not above.is_dir():
            raise UserError(f"--out {shown} is under {clip(above)}, which is a file, not a folder.")
        made = [out, *[p for p in out.parents if not p.exists()]]
        try:
            out.mkdir(parents=True)
        except OSError as e:
            raise UserError(f"Cannot make the folder --out {shown} ({_reason(e)}).") from None
    try:
        with tempfile.TemporaryFile(dir=out):
            pass
    except OSError as e:
        discard(made)
        raise UserError(f"Cannot write in the folder --out {shown} ({_reason(e)}).") from None
    return made


def discard(made: list[Path]) -> None:
    """Removes the folders :func:`prepare_out` made, where they are still empty."""
    for folder in made:
        try:
            folder.rmdir()
        except OSError:
            return


def save(out: Path, files: dict[str, str]) -> tuple[list[Path], str | None]:
    """Writes ``files`` (name -> text) in ``out``, each whole or not at all (written
    beside, then renamed over the old one). Where ``out`` fails now (checked before the
    run, then removed or filled meanwhile), they go to a fresh temporary folder instead:
    returns the paths written and, then, the one sentence that says so."""
    try:
        return [_replace(out / name, text) for name, text in files.items()], None
    except OSError as e:
        spare = Path(tempfile.mkdtemp(prefix="mtp-viz-bench-"))
        paths = [_replace(spare / name, text) for name, text in files.items()]
        return paths, f"Cannot write in --out {clip(out)} ({_reason(e)}); the results are in {spare} instead."


def _replace(path: Path, text: str) -> Path:
    partial = path.with_name(f".{path.name}.partial")
    try:
        partial.write_text(text, encoding="utf-8")
        os.replace(partial, path)
    except OSError:
        with contextlib.suppress(OSError):
            partial.unlink(missing_ok=True)
        raise
    return path


def _reason(e: OSError) -> str:
    return (e.strerror or type(e).__name__).lower()


def figures(result) -> list:
    """Plotly figures: speedup vs γ (measured and predicted), acceptance by position,
    speedup by category, overhead against transformers."""
    import plotly.graph_objects as go
    rows, figs = result["settings"], []
    const = sorted((r for r in rows if r["schedule"] == "constant"), key=lambda r: r["draft_tokens"])
    if const:
        f = go.Figure()
        xs = [r["draft_tokens"] for r in const]
        f.add_scatter(x=xs, y=[r["speedup"] for r in const], name="ours (measured, end to end)",
                      mode="lines+markers")
        f.add_scatter(x=xs, y=[r["decode_speedup"] for r in const], name="ours (measured, decode)",
                      mode="lines+markers")
        f.add_scatter(x=xs, y=[r["reference_speedup"] for r in const], name="transformers (measured)",
                      mode="lines+markers")
        f.add_scatter(x=xs, y=[r["predicted_speedup"] for r in const], name="Leviathan et al. (predicted)",
                      mode="lines+markers", line={"dash": "dash"})
        f.add_scatter(x=xs, y=[r["predicted_speedup_with_verify_cost"] for r in const],
                      name="predicted, measured verify cost", mode="lines+markers", line={"dash": "dot"})
        for r in rows:
            if r["schedule"] != "constant":
                f.add_scatter(x=[r["mean_draft_tokens"]], y=[r["speedup"]], mode="markers",
                              marker={"size": 12, "symbol": "star"}, name=f"{r['setting']} (mean γ)")
        f.add_hline(y=1.0, line={"color": "grey", "width": 1})
        f.update_layout(title="Speedup over autoregressive vs draft length", xaxis_title="draft length γ",
                        yaxis_title="speedup")
        figs.append(f)
    f = go.Figure()
    for r in rows:
        cond = r["per_position_conditional"]
        if cond:
            f.add_scatter(x=list(range(1, len(cond) + 1)), y=cond, mode="lines+markers",
                          name=f"{r['setting']} conditional")
            f.add_scatter(x=list(range(1, len(cond) + 1)), y=r["per_position_unconditional"],
                          mode="lines+markers", line={"dash": "dot"}, name=f"{r['setting']} unconditional")
    f.update_layout(title="Acceptance by draft position", xaxis_title="position in draft",
                    yaxis_title="acceptance", yaxis_range=[0, 1.02])
    figs.append(f)
    f = go.Figure()
    cats = [c["category"] for c in result["categories"]]
    for r in rows:
        f.add_bar(x=cats, y=[c[r["setting"]]["speedup"] for c in result["categories"]], name=r["setting"])
    f.add_hline(y=1.0, line={"color": "grey", "width": 1})
    f.update_layout(title="When does MTP help? Speedup by task category", barmode="group",
                    yaxis_title="speedup")
    figs.append(f)
    with_ref = [r for r in rows if r["overhead_vs_reference"] is not None]
    if with_ref:
        f = go.Figure()
        f.add_bar(x=[r["setting"] for r in with_ref], y=[r["overhead_vs_reference"] for r in with_ref])
        f.add_hline(y=1.0, line={"color": "grey", "width": 1})
        f.update_layout(title="Our wall time ÷ transformers' (same drafts, same tokens)",
                        yaxis_title="ratio (lower is faster)")
        figs.append(f)
    return figs


def html_report(result, extra: list = ()) -> str:
    """One self-contained page: plotly.js inline, so it opens offline."""
    parts = []
    for i, fig in enumerate(figures(result)):
        parts.append(fig.to_html(full_html=False, include_plotlyjs=(i == 0)))
    table = document.html(blocks(result, extra))
    warn = ""
    if result["meta"].get("parity_failures"):
        warn = (f'<p style="color:#b00;font-weight:bold">PARITY FAILURE: '
                f'{result["meta"]["parity_failures"]} greedy run(s) differ from transformers.</p>')
    return ("<!doctype html><html><head><meta charset='utf-8'><title>mtp-viz bench</title>"
            "<style>body{font-family:sans-serif;margin:2em;max-width:1200px}"
            "table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:2px 6px;"
            "font-size:13px}</style></head><body>" + warn + table + "".join(parts) + "</body></html>")
