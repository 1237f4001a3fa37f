"""`mtp-viz bench --server URL [--baseline-server URL]`: is speculation helping on a vLLM server?

The flags, the progress lines and the report (table, JSON, HTML); the runs and their
reduction are :mod:`mtp_viz.measure.server`'s, the concurrency sweep
:mod:`mtp_viz.measure.traffic`'s. The server's ``/metrics`` counters are scraped after the
warm-up and at the end, for the figures of all the traffic it saw meanwhile (the
baseline's too, when the baseline is the same server), as a check.
"""
from __future__ import annotations

import contextlib
import dataclasses
import json
import sys
from pathlib import Path
from typing import Any

from mtp_viz.engine.decoding import Sampling
from mtp_viz.engine.events import Start
from mtp_viz.errors import UserError
from mtp_viz.measure import server, traffic
from mtp_viz.sources import open_server
from mtp_viz.sources.http import ServerError, public
from mtp_viz.sources.prometheus import delta
from mtp_viz.sources.servers import Servers
from mtp_viz.sources.settings import RunSettings
from mtp_viz.views import document
from mtp_viz.views.document import Table

from .bench_report import save


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


def _settings(args, n: int) -> RunSettings:
    """What every request of this bench asks (each sets its prompt and mode)."""
    greedy = args.temperature <= 0
    return RunSettings("", max_new_tokens=n, chat=not args.no_chat,
                       sampling=Sampling(max(args.temperature, 0.0), seed=None if greedy else args.seed))


def run(args, plan) -> int:
    """``plan``: the bench's flags, checked (:func:`mtp_viz.cli.bench.check`)."""
    n, repeats, prompts, levels = plan.n, plan.repeats, plan.prompts, plan.levels
    url, base = args.server, args.baseline_server
    source = open_server(Servers(url, base, args.model, args.baseline_model))
    modes = ["speculative"] + (["autoregressive"] if base else [])
    settings = _settings(args, n)
    warm = server.warm_up(source, settings, prompts[0].text, modes)  # untimed; checks both
    base_speculates = bool(base) and warm["autoregressive"][0].settings.get("server_speculates")
    before = source.counters(url)
    print(f"mtp-viz bench: {public(url)}" + (f" against {public(base)}" if base else "") +
          f"; {len(prompts)} prompts x {repeats} repeats, {n} new tokens each", file=sys.stderr)
    records, streams = server.timed(source, settings, prompts, modes, repeats)
    after = source.counters(url)
    result = server.reduce(records, streams, delta(after, before), meta={
        "server": public(url), "baseline_server": base and public(base), "max_new_tokens": n, "repeats": repeats,
        "prompts": len(prompts), "temperature": args.temperature, "chat": not args.no_chat,
        "model": next(e.settings.get("model") for e in streams[0][1] if isinstance(e, Start)),
        "draft_tokens": len(before.accepted_per_pos), "quick": args.quick,
        "baseline_speculates": base_speculates, **_software(source, url, base)})
    swept = _sweep(source.servers, prompts, levels, plan.requests, settings) if levels else None
    return _write(result, swept, Path(args.out))


def _software(source, url: str, base: str | None) -> dict[str, Any]:
    """Which software answered, and its version as it reports it (llama.cpp's ``/props``
    build, vLLM's ``/version``): a study is only as good as its record of what it measured."""
    def version(at: str | None) -> str | None:
        try:
            return source.version(at) if at else None
        except ServerError:   # a server that says nothing of its version is recorded as such
            return None
    return {"software": source.label, "software_version": version(url), "baseline_software_version": version(base)}


def _sweep(servers: Servers, prompts, levels: list[int], requests: int | None,
           settings: RunSettings) -> traffic.TrafficResult:
    requests = requests or max(8, 2 * max(levels))
    print(f"mtp-viz bench: traffic at {', '.join(map(str, levels))} concurrent requests, "
          f"{requests} requests per level and server", file=sys.stderr)
    return traffic.sweep(servers, [p.text for p in prompts], levels, requests,
                         lambda prompt, mode: dataclasses.replace(settings, prompt=prompt, modes=(mode,)),
                         greedy=settings.greedy, progress=lambda line: print(f"  {line}", file=sys.stderr))


def _write(result: dict[str, Any], swept: traffic.TrafficResult | None, out: Path) -> int:
    if swept is not None:
        result.update(swept.as_dict())
    report = blocks(result) + (traffic_blocks(result) if swept is not None else [])
    md = document.markdown(report)
    files = {"bench.json": json.dumps(result, indent=1, ensure_ascii=False) + "\n", "bench.md": md}
    if swept is not None:
        from mtp_viz.views.traffic import figures
        files["bench.html"] = _html(report, figures(swept.rows))
    written, failed = save(out, files)
    if not failed and "bench.html" not in files:  # an earlier bench's report (--force) is not this one's
        with contextlib.suppress(OSError):
            (out / "bench.html").unlink(missing_ok=True)
    print(md)
    print(f"wrote {', '.join(map(str, written))}", file=sys.stderr)
    if failed:
        raise UserError(failed)
    return 0


def _html(report: list, figures) -> str:
    """The report as one offline page: its tables, then the traffic charts (plotly.js inlined once)."""
    import html

    import plotly.io as pio

    def plain(fig) -> dict:  # built unvalidated with template "none": plotly's writer wants a template object
        d = fig.to_dict()
        d["layout"]["template"] = {}
        return d
    plots = "".join(pio.to_html(plain(f), full_html=False, include_plotlyjs=i == 0, validate=False)
                    for i, f in enumerate(figures))
    return ('<!doctype html><html lang="en"><head><meta charset="utf-8"><title>mtp-viz bench: vLLM servers</title>'
            '<style>body{font-family:system-ui,sans-serif;max-width:1100px;margin:24px auto;padding:0 16px}'
            'table{border-collapse:collapse}td,th{border:1px solid #d1d5db;padding:3px 8px}</style></head><body>'
            f'<h1>{html.escape("mtp-viz bench: vLLM servers")}</h1>{document.html(report)}{plots}</body></html>')


def _f(x, fmt="{:.2f}"):
    return "–" if x is None else fmt.format(x)


def blocks(result) -> list:
    """A server bench as :mod:`mtp_viz.views.document` blocks."""
    m, sp, bl, sc = result["meta"], result["speculative"], result["baseline"], result["server_counters"]
    same = sp["same_tokens_as_baseline"]
    out = [("h2", f"mtp-viz bench: {m.get('software', 'vLLM')} server {m['server']}"
                  + (f" vs {m['baseline_server']}" if m["baseline_server"] else ""))]
    if m.get("software_version"):
        out.append(("p", f"Software: {m['software']} {m['software_version']}"
                         + (f" (baseline: {m['baseline_software_version']})"
                            if m.get("baseline_software_version") else "")
                         + "."))
    baseline = ((f"baseline ({'it speculates too' if m['baseline_speculates'] else 'no speculation'})",
                 _f(bl["tokens_per_second"], "{:.1f}"), "×1.00", "", "", "", "")
                if m["baseline_server"] else ("baseline", "– (no --baseline-server)", "", "", "", "", ""))
    spec = ("speculative", _f(sp["tokens_per_second"], "{:.1f}"), _f(sp["speedup"], "×{:.2f}"),
            _f(sp["acceptance_rate"], "{:.1%}"), _f(sp["alpha"], "{:.3f}"), _f(sp["tau"]),
            "–" if same is None else "yes" if same else f"NO ({sp['runs_differing_from_baseline']} runs)")
    depth = len(sc["per_position_conditional"])
    out += [("p", f"{m['model']}, {m['draft_tokens']} drafts per step; {m['prompts']} prompts, "
                  f"{m['max_new_tokens']} new tokens, {m['repeats']} repeat(s), temperature {m['temperature']}."),
            ("table", Table(("server", "tok/s", "speedup", "accept", "α", "τ", "same tokens"), (baseline, spec))),
            ("h3", "Acceptance by draft position (conditional / unconditional)"),
            ("table", Table(("source", *(str(k + 1) for k in range(depth))), (
                ("these requests", *(f"{_f(c)} / {_f(u)}" for c, u in zip(sp["per_position_conditional"],
                                                                           sp["per_position_unconditional"]))),
                ("server counters", *(f"{_f(c)} / {_f(u)}" for c, u in zip(sc["per_position_conditional"],
                                                                            sc["per_position_unconditional"])))))),
            ("p", f"Server counters over the run (all its traffic): {sc['verify_steps']:.0f} verify steps, "
                  f"acceptance {_f(sc['acceptance_rate'], '{:.1%}')}, τ {_f(sc['tau'])}."),
            ("p", "speedup: tokens/s over the baseline server's, client wall time (median of repeats); accept: "
                  "accepted ÷ drafted; α: per-token acceptance (MLE); τ: tokens per verify step after the prefill, "
                  "bonus included; same tokens: greedy output identical to the baseline's."),
            ("table", Table(("category", "speedup", "α"), tuple(
                (c["category"], _f(c["speedup"], "×{:.2f}"), _f(c["alpha"], "{:.2f}")) for c in result["categories"])))]
    return out


def traffic_blocks(result: dict[str, Any]) -> list:
    """The traffic table of the report (bench.json's ``traffic`` rows), as blocks."""
    rows = tuple((str(r["concurrency"]), str(r["server"]), str(r["requests"]), _f(r["tokens_per_second"], "{:.1f}"),
                  _f(r["ttft_ms_p50"], "{:.0f}"),
                  f"{_f(r['tpot_ms_p50'], '{:.1f}')} / {_f(r['tpot_ms_p90'], '{:.1f}')}",
                  _f(r["acceptance_rate"], "{:.1%}"), _f(r["tau"], "{:.2f}"), _f(r["speedup"], "×{:.2f}"),
                  _f(r["tpot_ratio"], "×{:.2f}")) for r in result["traffic"])
    same = result.get("same_tokens")
    return [("h3", "Under load: concurrent requests"),
            ("table", Table(("concurrency", "server", "requests", "tok/s", "TTFT p50 ms", "TPOT p50 / p90 ms",
                             "accept", "τ", "speedup", "per-user ×"), rows)),
            ("p", "Greedy outputs identical on both servers at every level: "
                  + ("–" if same is None else "yes" if same else "NO") + ".")]
