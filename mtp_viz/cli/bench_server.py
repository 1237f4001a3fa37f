"""`mtp-viz bench --server URL [--baseline-server URL]`: is speculation helping on a vLLM server?

Every prompt of the suite goes to the speculating server and, when given, to a
baseline server that serves the same model without speculation; the two alternate
(which goes first flips from prompt to prompt and repeat to repeat) so drift of the
machine falls on both alike, after one untimed warm-up request each. Wall time is the
client's, from sending the request to the last chunk (what a user of the server waits).

Reported, all from the server's own per-step arrays through :mod:`mtp_viz.analysis.metrics`:
speedup (pooled tokens/s over the baseline's, median over repeats), acceptance
(accepted ÷ drafted), α (per-token acceptance, MLE), τ (tokens per verify step after
the prefill, bonus included, as vLLM's ``mean_acceptance_length``), acceptance per
draft position (conditional and unconditional), and under greedy decoding whether the
two servers wrote the same tokens. The server's ``/metrics`` counters, scraped after the
warm-up and at the end, give the same figures for all the traffic it saw meanwhile (the
baseline's too, when the baseline is the same server), as a check.
"""
from __future__ import annotations

import contextlib
import json
import statistics
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

from mtp_viz.analysis import metrics
from mtp_viz.engine.decoding import Sampling
from mtp_viz.engine.events import Done, Start
from mtp_viz.errors import UserError
from mtp_viz.sources.settings import RunSettings
from mtp_viz.sources.vllm import client as vllm_client
from mtp_viz.sources.vllm.prometheus import delta
from mtp_viz.sources.vllm.source import Servers, VllmSource

from . import bench_traffic as traffic
from .bench_report import Record, save


def add_arguments(p) -> None:
    """The server flags of ``mtp-viz bench``; the prompt, token and output flags are shared."""
    p.add_argument("--server", metavar="URL",
                   help="bench a vLLM server with speculation instead of the local engine")
    p.add_argument("--baseline-server", metavar="URL",
                   help="with --server: a vLLM server of the same model without speculation")
    p.add_argument("--model", help="with --server: the served model's name (default: its first)")
    p.add_argument("--baseline-model", help="the baseline server's model name (default: its first)")
    p.add_argument("--concurrency", metavar="LEVELS",
                   help="with --server and --baseline-server: also sweep these numbers of concurrent "
                        "closed-loop clients, e.g. 1,2,4,8 (at most 16)")
    p.add_argument("--requests", type=int, default=None,
                   help=f"with --concurrency: requests per level and server, 1 to {traffic.MAX_REQUESTS} "
                        "(default: 2 x the largest level, at least 8)")


def _run_one(source: VllmSource, prompt: str, mode: str, n: int, args) -> tuple[Record, list]:
    """One run of ``mode`` through the servers' source; the record and its events."""
    greedy = args.temperature <= 0
    s = RunSettings(prompt, modes=(mode,), max_new_tokens=n, chat=not args.no_chat,
                    sampling=Sampling(max(args.temperature, 0.0), seed=None if greedy else args.seed))
    evs = list(source.events(s))
    done = evs[-1]
    assert isinstance(done, Done)
    return Record(mode, done.seconds, done.new_tokens, done.target_forwards, tuple(done.generated_ids)), evs


def run(args, plan) -> int:
    """``plan``: the bench's flags, checked (:func:`mtp_viz.cli.bench.check`)."""
    quick, n, repeats, prompts, levels = args.quick, plan.n, plan.repeats, plan.prompts, plan.levels
    url, base = args.server, args.baseline_server
    source = VllmSource(Servers(url, base, args.model, args.baseline_model))
    modes = ["speculative"] + (["autoregressive"] if base else [])
    warm = {mode: _run_one(source, prompts[0].text, mode, min(n, 8), args)[1]  # untimed; checks both
            for mode in modes}
    base_speculates = bool(base) and warm["autoregressive"][0].settings.get("server_speculates")
    before = vllm_client.scrape(url, args.model)
    print(f"mtp-viz bench: {url}" + (f" against {base}" if base else "") +
          f"; {len(prompts)} prompts x {repeats} repeats, {n} new tokens each", file=sys.stderr)
    records, streams = [], []
    for r in range(repeats):
        for i, p in enumerate(prompts):
            order = modes if (r * len(prompts) + i) % 2 == 0 else modes[::-1]
            done = {}
            for mode in order:
                rec, evs = _run_one(source, p.text, mode, n, args)
                done[mode] = rec = replace(rec, prompt_id=p.id, category=p.category, repeat=r)
                if mode == "speculative":
                    streams.append((p, evs))
            if base and args.temperature <= 0:
                done["speculative"].same_tokens = done["speculative"].ids == done["autoregressive"].ids
            records.extend(done.values())
    after = vllm_client.scrape(url, args.model)
    result = reduce(records, streams, delta(after, before), meta={
        "server": url, "baseline_server": base, "max_new_tokens": n, "repeats": repeats,
        "prompts": len(prompts), "temperature": args.temperature, "chat": not args.no_chat,
        "model": next(e.settings["model"] for e in streams[0][1] if isinstance(e, Start)),
        "draft_tokens": len(before.accepted_per_pos), "quick": quick,
        "baseline_speculates": base_speculates})
    result["runs"] = [rec.as_dict() for rec in records]
    if levels:
        result.update(_sweep(source.servers, prompts, levels, plan.requests, n, args))
    return _write(result, Path(args.out))


def _sweep(servers: Servers, prompts, levels: list[int], requests: int | None, n: int, args) -> dict[str, Any]:
    greedy = args.temperature <= 0
    requests = requests or max(8, 2 * max(levels))

    def settings(prompt: str, mode: str) -> RunSettings:
        return RunSettings(prompt, modes=(mode,), max_new_tokens=n, chat=not args.no_chat,
                           sampling=Sampling(max(args.temperature, 0.0), seed=None if greedy else args.seed))
    print(f"mtp-viz bench: traffic at {', '.join(map(str, levels))} concurrent requests, "
          f"{requests} requests per level and server", file=sys.stderr)
    return traffic.sweep(servers, [p.text for p in prompts], levels, requests, settings, greedy=greedy,
                         progress=lambda line: print(f"  {line}", file=sys.stderr))


def _write(result: dict[str, Any], out: Path) -> int:
    md = markdown(result) + ("\n" + traffic.markdown(result) if "traffic" in result else "")
    files = {"bench.json": json.dumps(result, indent=1, ensure_ascii=False) + "\n", "bench.md": md}
    if "traffic" in result:
        files["bench.html"] = _html(md, traffic.figures(result["traffic"]))
    written, failed = save(out, files)
    if not failed and "bench.html" not in files:  # an earlier bench's report (--force) is not this one's
        with contextlib.suppress(OSError):
            (out / "bench.html").unlink(missing_ok=True)
    print(md)
    print(f"wrote {', '.join(map(str, written))}", file=sys.stderr)
    if failed:
        raise UserError(failed)
    return 0


def _html(md: str, figures) -> str:
    """The report as one offline page: its tables, then the traffic charts (plotly.js inlined once)."""
    import html

    import plotly.io as pio

    from .bench_report import _md_table_html
    def plain(fig) -> dict:  # built unvalidated with template "none": plotly's writer wants a template object
        d = fig.to_dict()
        d["layout"]["template"] = {}
        return d
    plots = "".join(pio.to_html(plain(f), full_html=False, include_plotlyjs=i == 0, validate=False)
                    for i, f in enumerate(figures))
    return ('<!doctype html><html lang="en"><head><meta charset="utf-8"><title>mtp-viz bench: vLLM servers</title>'
            '<style>body{font-family:system-ui,sans-serif;max-width:1100px;margin:24px auto;padding:0 16px}'
            'table{border-collapse:collapse}td,th{border:1px solid #d1d5db;padding:3px 8px}</style></head><body>'
            f'<h1>{html.escape("mtp-viz bench: vLLM servers")}</h1>{_md_table_html(md)}{plots}</body></html>')


def _tps(records, mode, category=None) -> dict[int, float]:
    """repeat -> pooled tokens/s (Σ tokens ÷ Σ seconds over the prompts)."""
    tok: dict[int, float] = {}
    sec: dict[int, float] = {}
    for r in records:
        if r.mode == mode and (category is None or r.category == category):
            tok[r.repeat] = tok.get(r.repeat, 0) + r.new_tokens
            sec[r.repeat] = sec.get(r.repeat, 0) + r.seconds
    return {k: tok[k] / sec[k] for k in tok if sec[k] > 0}


def _speedup(records, category=None) -> float | None:
    spec, base = _tps(records, "speculative", category), _tps(records, "autoregressive", category)
    ratios = [spec[k] / base[k] for k in spec if base.get(k)]
    return statistics.median(ratios) if ratios else None


def _median(xs):
    return statistics.median(xs) if xs else None


def reduce(records, streams, traffic, meta) -> dict[str, Any]:
    evs = [e for _, s in streams for e in s]
    s = metrics.summarize(evs)
    same = [r.same_tokens for r in records if r.same_tokens is not None]
    cats = sorted({p.category for p, _ in streams})
    return {
        "meta": meta,
        "speculative": {
            "tokens_per_second": _median(list(_tps(records, "speculative").values())),
            "speedup": _speedup(records),
            "acceptance_rate": s.acceptance_rate, "alpha": s.alpha,
            # τ after the prefill: (tokens − one per generation) ÷ verify steps
            "tau": (s.new_tokens - s.generations) / (s.target_forwards - s.generations)
            if s.target_forwards > s.generations else None,
            "mean_draft_len": s.mean_draft_len,
            "per_position_conditional": s.per_position_conditional,
            "per_position_unconditional": s.per_position_unconditional,
            "same_tokens_as_baseline": (all(same) if same else None),
            "runs_differing_from_baseline": sum(not x for x in same),
        },
        "baseline": {"tokens_per_second": _median(list(_tps(records, "autoregressive").values()))},
        "server_counters": {
            "verify_steps": traffic.drafts, "drafted": traffic.draft_tokens,
            "accepted": traffic.accepted_tokens, "acceptance_rate": traffic.acceptance_rate,
            "tau": traffic.mean_acceptance_length,
            "per_position_unconditional": traffic.per_position(False),
            "per_position_conditional": traffic.per_position(True)},
        "categories": [{"category": c, "speedup": _speedup(records, c),
                        "alpha": metrics.alpha_estimate([e for p, st in streams if p.category == c
                                                         for e in st])} for c in cats],
    }


def _f(x, fmt="{:.2f}"):
    return "–" if x is None else fmt.format(x)


def markdown(result) -> str:
    m, sp, bl, sc = result["meta"], result["speculative"], result["baseline"], result["server_counters"]
    same = sp["same_tokens_as_baseline"]
    lines = [
        f"## mtp-viz bench: vLLM server {m['server']}" + (f" vs {m['baseline_server']}" if m["baseline_server"] else ""),
        "", f"{m['model']}, {m['draft_tokens']} drafts per step; {m['prompts']} prompts, "
        f"{m['max_new_tokens']} new tokens, {m['repeats']} repeat(s), temperature {m['temperature']}.", "",
        "| server | tok/s | speedup | accept | α | τ | same tokens |", "|---|---|---|---|---|---|---|",
        f"| baseline ({'it speculates too' if m['baseline_speculates'] else 'no speculation'}) | "
        f"{_f(bl['tokens_per_second'], '{:.1f}')} | ×1.00 | | | | |"
        if m["baseline_server"] else "| baseline | – (no --baseline-server) | | | | | |",
        f"| speculative | {_f(sp['tokens_per_second'], '{:.1f}')} | {_f(sp['speedup'], '×{:.2f}')} | "
        f"{_f(sp['acceptance_rate'], '{:.1%}')} | {_f(sp['alpha'], '{:.3f}')} | {_f(sp['tau'])} | "
        + ("–" if same is None else "yes" if same else f"NO ({sp['runs_differing_from_baseline']} runs)") + " |",
        "", "### Acceptance by draft position (conditional / unconditional)", "",
        "| source | " + " | ".join(str(k + 1) for k in range(len(sc["per_position_conditional"]))) + " |",
        "|---|" + "---|" * len(sc["per_position_conditional"]),
        "| these requests | " + " | ".join(
            f"{_f(c)} / {_f(u)}" for c, u in zip(sp["per_position_conditional"], sp["per_position_unconditional"])) + " |",
        "| server counters | " + " | ".join(
            f"{_f(c)} / {_f(u)}" for c, u in zip(sc["per_position_conditional"], sc["per_position_unconditional"])) + " |",
        "", f"Server counters over the run (all its traffic): {sc['verify_steps']:.0f} verify steps, "
        f"acceptance {_f(sc['acceptance_rate'], '{:.1%}')}, τ {_f(sc['tau'])}.", "",
        "speedup: tokens/s over the baseline server's, client wall time (median of repeats); accept: accepted ÷ "
        "drafted; α: per-token acceptance (MLE); τ: tokens per verify step after the prefill, bonus "
        "included; same tokens: greedy output identical to the baseline's.", "",
        "| category | speedup | α |", "|---|---|---|"]
    lines += [f"| {c['category']} | {_f(c['speedup'], '×{:.2f}')} | {_f(c['alpha'], '{:.2f}')} |"
              for c in result["categories"]]
    return "\n".join(lines) + "\n"
