"""`mtp-viz bench`: speedup, acceptance and overhead, held against the theory.

Every prompt runs in three modes (:mod:`mtp_viz.measure.runner`):

- ``autoregressive``: our engine's plain decoding, the baseline for every speedup;
- ``reference``: transformers' own assisted decoding,
  ``target.generate(ids, assistant_model=drafter, do_sample=False)``, with a constant
  draft length;
- ``speculative`` (bench.json's ``ours``): our engine through the local source, for
  every setting (schedule × draft length).

Runs alternate (:mod:`mtp_viz.measure.session`): within each repeat, each prompt runs
every mode and setting once, in an order rotated from prompt to prompt and repeat to
repeat, so slow drift of the machine (thermal, other jobs) falls on all modes alike.
Greedy runs must reproduce the reference token for token; a mismatch is reported loudly
and makes the command exit with status 1.

This module holds the flags, their checks, and what the bench prints and writes; the
runs and their reduction are :mod:`mtp_viz.measure`'s. ``--precisions T/D,...`` runs
several precision pairs in the same run, each reduced against its own target's plain
decoding (:mod:`mtp_viz.measure.arms`). ``--server URL`` benches a vLLM server instead
(:mod:`mtp_viz.cli.bench_server`).
"""
from __future__ import annotations

import argparse
import dataclasses
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from mtp_viz.engine.decoding import Sampling
from mtp_viz.errors import UserError
from mtp_viz.measure.records import Setting, settings_grid
from mtp_viz.prompts import Prompt, load_prompts
from mtp_viz.sources.http import public
from mtp_viz.sources.precision import Precision
from mtp_viz.sources.settings import MAX_DRAFT_TOKENS, RunSettings

from . import bench_precision, bench_report
from .flags import engine_of
from .generate import MAX_NEW_TOKENS

QUICK = dict(max_new_tokens=24, repeats=1, draft_tokens=(2, 4), per_category=1)
MAX_REPEATS = 100      # timed repeats of every run
DEFAULT_SCHEDULES = "constant,heuristic,optimal"
SERVER_ONLY = ("--model", "--baseline-model", "--concurrency", "--requests")


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--target", default="tiny", help="target model: hub id, local folder or 'tiny'")
    p.add_argument("--drafter", default=None, help="MTP assistant (default: the target's usual one)")
    from .flags import add_engine_argument, add_precision_arguments, add_weights_argument
    add_precision_arguments(p)
    add_weights_argument(p)
    p.add_argument("--precisions", default=None, metavar="T/D,...",
                   help="several precision pairs in one run, target/drafter each, e.g. "
                        "float32/float32,bfloat16/float32,int8/int8: one row each, with drift from float32")
    p.add_argument("--prompts", default=None,
                   help="prompt suite JSON (default: the bundled category suite, mtp_viz/assets/prompts.json)")
    p.add_argument("--categories", default=None, help="comma-separated categories to keep")
    p.add_argument("--per-category", type=int, default=None,
                   help="use at most this many prompts per category (0: all, the default; 1 with --quick)")
    p.add_argument("--draft-tokens", default=None,
                   help=f"comma-separated draft lengths for the constant schedule, each 1 to {MAX_DRAFT_TOKENS} "
                        "(default 1,2,4,8)")
    p.add_argument("--schedules", default=DEFAULT_SCHEDULES,
                   help="comma-separated schedules; adaptive ones start from the median draft length")
    p.add_argument("--max-draft-tokens", type=int, default=MAX_DRAFT_TOKENS,
                   help=f"cap for adaptive schedules, 1 to {MAX_DRAFT_TOKENS} (default {MAX_DRAFT_TOKENS})")
    p.add_argument("--repeats", type=int, default=None, help=f"timed repeats, 1 to {MAX_REPEATS} (default 3)")
    p.add_argument("--max-new-tokens", type=int, default=None,
                   help=f"tokens per run, 1 to {MAX_NEW_TOKENS} (default 64)")
    p.add_argument("--temperature", type=float, default=0.0,
                   help="0 = greedy (default); above 0 the reference and parity checks are skipped")
    p.add_argument("--seed", type=int, default=0, help="sampling seed (temperature > 0)")
    p.add_argument("--stale-kv", action="store_true",
                   help="give our drafter transformers' stale KV entry after a rejection")
    p.add_argument("--threads", type=int, default=None,
                   help="torch CPU threads for the run, at most this machine's cores (default: MTP_VIZ_THREADS, "
                        "else one less than the cores, at most 8: the app's; 0: torch's own choice)")
    p.add_argument("--no-chat", action="store_true", help="feed prompts without the chat template")
    add_engine_argument(p, "the engine measured beside the eager one, interleaved in the same run (every row "
                           "says which; compile time reported apart)")
    p.add_argument("--peer", default=None, metavar="URL[,URL...]",
                   help="inference servers (llama.cpp or vLLM, recognised by what they answer; plain or "
                        "speculating) run on the same prompts, interleaved prompt by prompt with the local "
                        "engines: a row each, and every row's speedup over the fastest plain decoder measured")
    p.add_argument("--out", default="bench-results",
                   help="folder for bench.json/.md/.html, checked (or made) before the first run")
    p.add_argument("--force", action="store_true",
                   help="overwrite the results of an earlier bench in --out (without it, such a folder is refused)")
    p.add_argument("--quick", action="store_true",
                   help="smoke run: one prompt per category, 24 tokens, draft lengths 2,4, one repeat")
    p.add_argument("--no-progress", action="store_true", help="no progress bar on stderr")
    p.add_argument("--wide", action="store_true",
                   help="every column of the table on the terminal (bench.md always has them all)")
    from .bench_server import add_arguments as add_server_arguments
    add_server_arguments(p)


def parse_settings(draft_tokens: str | None, schedules: str, quick: bool) -> list[Setting]:
    from mtp_viz.engine.schedules import SCHEDULES
    try:
        draft_tokens_list = ([int(x) for x in draft_tokens.split(",") if x.strip()] if draft_tokens
                  else list(QUICK["draft_tokens"] if quick else (1, 2, 4, 8)))
    except ValueError as e:
        raise UserError("--draft-tokens must be comma-separated whole numbers, like 1,2,4,8.") from e
    if not draft_tokens_list:
        raise UserError("--draft-tokens must list draft lengths, like 1,2,4,8.")
    names = [s.strip() for s in schedules.split(",") if s.strip()]
    if not names:
        raise UserError(f"--schedules must list schedules, like {','.join(SCHEDULES)}.")
    for s in names:
        if s not in SCHEDULES:
            raise UserError(f"Unknown schedule {s!r}; choose from {', '.join(SCHEDULES)}.")
    return settings_grid(draft_tokens_list, names)


@dataclass(frozen=True)
class Plan:
    """A bench's flags, checked, with their defaults filled in."""
    n: int                                  # new tokens per run
    repeats: int
    prompts: list[Prompt]
    settings: list[Setting]
    precisions: list[Precision]
    sampling: Sampling
    levels: list[int] | None = None         # --concurrency (a server bench)
    requests: int | None = None             # --requests
    peers: tuple[str, ...] = ()             # --peer URLs

    @property
    def greedy(self) -> bool:
        return self.sampling.greedy


def check(args: argparse.Namespace) -> Plan:
    """Every flag of the bench, checked once and before any model loads or server is
    asked: the first bad one is one sentence. Run settings are checked as every run's
    are (:meth:`mtp_viz.sources.settings.RunSettings.validate`)."""
    from mtp_viz.measure import traffic
    server = bool(args.server or args.baseline_server)
    if server:
        local = [flag for flag, on in (
            ("--draft-tokens", args.draft_tokens), ("--drafter", args.drafter), ("--dtype", args.dtype),
            ("--target-precision", args.target_precision), ("--drafter-precision", args.drafter_precision),
            ("--precisions", args.precisions), (args.engine_flag, args.engine is not None),
            ("--stale-kv", args.stale_kv),
            ("--schedules", args.schedules != DEFAULT_SCHEDULES),
            ("--max-draft-tokens", args.max_draft_tokens != MAX_DRAFT_TOKENS), ("--threads", args.threads is not None),
            ("--weights", args.weights != "real"))
            if on]
        if local:
            raise UserError(f"{local[0]} applies to the local engine; a vLLM server's drafter, draft length, "
                            "precision, compilation and threads are set when it starts.")
        if not args.server:
            raise UserError("--baseline-server needs --server, the speculating server to compare.")
        if args.peer:
            raise UserError("--peer measures servers beside the local engine; with --server, give the other "
                            "server as --baseline-server.")
    else:
        given = [flag for flag in SERVER_ONLY if getattr(args, flag[2:].replace("-", "_")) is not None]
        if given:
            raise UserError(f"{given[0]} applies to a vLLM server bench; give --server URL (and "
                            "--baseline-server URL).")
    quick = args.quick
    n = (QUICK["max_new_tokens"] if quick else 64) if args.max_new_tokens is None else args.max_new_tokens
    repeats = (QUICK["repeats"] if quick else 3) if args.repeats is None else args.repeats
    _between("--repeats", repeats, 1, MAX_REPEATS)
    per_category = (QUICK["per_category"] if quick else 0) if args.per_category is None else args.per_category
    _between("--per-category", per_category, 0, None, " (0: every prompt)")
    _between("--max-draft-tokens", args.max_draft_tokens, 1, MAX_DRAFT_TOKENS)
    if args.threads is not None:
        _between("--threads", args.threads, 0, os.cpu_count() or 1, " (0: torch's own choice)")
    levels = requests = None
    if args.concurrency is not None:
        if not args.baseline_server:
            raise UserError("--concurrency compares two servers: give --baseline-server too.")
        levels = traffic.parse_levels(args.concurrency)
    if args.requests is not None:
        if levels is None:
            raise UserError("--requests sets the requests per level of --concurrency; give --concurrency too.")
        requests = _between("--requests", args.requests, 1, traffic.MAX_REQUESTS)
    prompts = load_prompts(args.prompts, args.categories, per_category)
    settings = parse_settings(args.draft_tokens, args.schedules, quick)
    sampling = Sampling(args.temperature, seed=args.seed)
    for s in settings:  # as each run's settings will be: a bad one is refused before a model loads
        RunSettings(prompts[0].text, max_new_tokens=n, draft_tokens=s.draft_tokens, schedule=s.schedule,
                    sampling=sampling, chat=not args.no_chat).validate(MAX_NEW_TOKENS)
    precisions = [] if server else bench_precision.parse(args)  # every name checked before a model loads
    if sampling.greedy:
        sampling = Sampling()  # the seed is for sampling only
    peers = [u.strip() for u in (args.peer or "").split(",") if u.strip()]
    if args.peer is not None and not peers:
        raise UserError("--peer must list server URLs, like http://127.0.0.1:8080,http://127.0.0.1:8081.")
    return Plan(n, repeats, prompts, settings, precisions, sampling, levels, requests, tuple(peers))


def _between(flag: str, value: int, low: int, high: int | None, meaning: str = "") -> int:
    if value < low or (high is not None and value > high):
        raise UserError(f"{flag} must be a whole number from {low} to {high}{meaning}." if high is not None
                        else f"{flag} must be a whole number of at least {low}{meaning}.")
    return value


def run(args: argparse.Namespace) -> int:
    plan = check(args)
    made = bench_report.prepare_out(Path(args.out), args.force)  # before the first run, not after the last
    try:
        if args.server:
            from .bench_server import run as run_server
            return run_server(args, plan)
        return _local(args, plan)
    except BaseException:
        bench_report.discard(made)  # a folder this bench made stays only with its results
        raise


def _local(args: argparse.Namespace, plan: Plan) -> int:
    import torch

    from mtp_viz.sources.models import default_threads
    threads = torch.get_num_threads()
    wanted = default_threads() if args.threads is None else args.threads
    if wanted > 0:
        torch.set_num_threads(wanted)
    try:
        return _run(args, plan.sampling, plan.prompts, plan.settings, plan.precisions, plan.n, plan.repeats,
                    args.quick, plan.greedy, plan.peers)
    finally:
        torch.set_num_threads(threads)


def busy() -> None:
    """A warning on stderr when other work holds the cores this bench's threads need: its
    timings will be noisy (ratios measured in the same run still compare like with like)."""
    import torch
    threads = torch.get_num_threads()
    cores = os.cpu_count() or 1
    try:
        load = os.getloadavg()[0]
    except OSError:
        return
    if load + threads > cores + 0.5:
        print(f"mtp-viz bench: warning: the machine is busy (load {load:.1f} on {cores} cores, and this bench "
              f"wants {threads} thread{'s' if threads != 1 else ''}): its timings will be noisy; speedups "
              "within this run still compare runs that shared the same load.", file=sys.stderr)


def _arms(args, precisions, n, sampling, prompts=(), settings=()) -> list:
    """Each precision pair loaded (every model once per precision) with its runner; with
    ``--engine`` (or ``--compile``) naming another than the default, each again on that
    engine, compiled (where it compiles) for every run of ``prompts`` x ``settings`` (and
    the untimed warm-up) before the first."""
    from mtp_viz.engine.engines import default_engine
    from mtp_viz.measure.arms import Arm
    from mtp_viz.measure.runner import Runner
    from mtp_viz.sources.models import load_pairs
    t_load = time.perf_counter()
    pairs = load_pairs(args.target, args.drafter, precisions, weights=args.weights)
    if pairs[0].drafter_model is None:
        raise UserError("The bench needs an MTP drafter; pass --drafter.")
    if len({tuple(p.precision.values()) for p in pairs}) < len(pairs):  # e.g. float32/float32 and default/default
        raise UserError("--precisions lists a pair twice (a default is this device's float32 or bfloat16).")
    print(f"mtp-viz bench: loaded {args.target} in {time.perf_counter() - t_load:.1f} s", file=sys.stderr)
    if note := precision_note(pairs[0].device):
        print(f"mtp-viz bench: {note}", file=sys.stderr)
    baselines = len(pairs)   # the pairs as loaded, on the default engine: what the other arms are held against
    # what every run shares; each run sets its prompt, mode and setting
    base = RunSettings("", drafter="mtp", max_new_tokens=n, sampling=sampling, chat=not args.no_chat,
                       stale_kv=args.stale_kv)
    engine = engine_of(args)
    several = engine != default_engine()
    if several:
        pairs = pairs + bench_precision.on_engine(pairs, engine, compile_plan(base, prompts, settings))
    arms = [Arm(Precision(**p.precision), p, Runner(p, base, args.max_draft_tokens), engine=p.engine,
                several_engines=several, baseline=i < baselines) for i, p in enumerate(pairs)]
    print(f"mtp-viz bench: arms {', '.join(a.label for a in arms)}", file=sys.stderr)
    return arms


def precision_note(device: str) -> str | None:
    """Where ``device`` is a CPU without native bfloat16, the sentence that says so and which
    precision is fastest there (:func:`mtp_viz.sources.precision.fastest`); else None."""
    from mtp_viz.sources.precision import fastest
    best = fastest(device)
    return None if best.native_bfloat16 else best.why


def compile_plan(base: RunSettings, prompts, settings) -> list[RunSettings]:
    """The runs a bench makes, as the compiled engine plans its graphs: every prompt in
    both modes at every setting, and the untimed warm-up on the first prompt
    (:func:`mtp_viz.measure.session.interleaved`)."""
    from mtp_viz.measure.session import WARM_UP_TOKENS
    warm = dataclasses.replace(base, max_new_tokens=min(base.max_new_tokens, WARM_UP_TOKENS))
    return [dataclasses.replace(b, prompt=p.text, schedule=s.schedule, draft_tokens=s.draft_tokens)
            for b, ps in ((base, prompts), (warm, prompts[:1])) for p in ps for s in settings]


def _run(args, sampling, prompts, settings, precisions, n, repeats, quick, greedy, peer_urls=()) -> int:
    from tqdm.auto import tqdm

    from mtp_viz.measure.arms import reduce as reduce_arms
    from mtp_viz.measure.peers import open_peers
    from mtp_viz.measure.session import interleaved, tasks
    # the peers first: a server that is not there is one sentence before a model loads
    peers = open_peers(peer_urls, RunSettings("", max_new_tokens=n, sampling=sampling, chat=not args.no_chat))
    arms = _arms(args, precisions, n, sampling, prompts, settings)
    busy()  # after everything that can refuse: a bench that stops says one sentence
    print(f"mtp-viz bench: {len(prompts)} prompts x {len(settings)} settings x {len(arms)} arm(s)"
          + (f" and {', '.join(p.label for p in peers)}" if peers else "")
          + f" x {repeats} repeats, {n} new tokens each", file=sys.stderr)
    bar = tqdm(total=repeats * len(prompts) * len(tasks(arms, settings, greedy, peers)), desc="bench", unit="run",
               file=sys.stderr, disable=args.no_progress, dynamic_ncols=True)
    try:
        runs = interleaved(arms, settings, prompts, repeats, greedy, n, peers=peers, done=lambda: bar.update(1),
                           warn=lambda line: bar.write(line, file=sys.stderr))
    finally:
        bar.close()
        for a in arms:
            a.close()
    mismatches = runs.mismatches
    meta = {
        "target": args.target, "drafter": args.drafter, "weights": args.weights,
        "dtype": str(arms[0].pair.target.dtype).removeprefix("torch."), "precisions": [a.label for a in arms],
        "max_new_tokens": n, "repeats": repeats,
        "prompts": len(prompts), "settings": [s.name for s in settings],
        "temperature": sampling.temperature, "stale_kv": args.stale_kv, "chat": not args.no_chat,
        "quick": quick, "parity_failures": mismatches, **bench_report.environment(),
        "precision_note": precision_note(arms[0].pair.device),
        "engines": sorted({a.engine for a in arms}),
        "compile_seconds": {a.label: round(a.pair.compile_seconds, 2) for a in arms if not a.baseline},
        "peers": [public(p.url) for p in peers],
        "clock": "/".join(sorted({r.clock for r in runs.records if r.mode != "peer"})),
    }
    result = reduce_arms(meta, runs.records, runs.events, settings, arms, greedy, peers).as_dict()
    by_precision = bench_precision.blocks(result)
    paths, failed = bench_report.write(result, Path(args.out), by_precision)
    print(bench_report.markdown(result, by_precision, wide=args.wide))
    print(f"wrote {', '.join(str(p) for p in paths)}", file=sys.stderr)
    if mismatches:
        print(f"mtp-viz bench: PARITY FAILURE: {mismatches} greedy run(s) differ from "
              "transformers' reference output (see 'parity' in bench.json)", file=sys.stderr)
    if failed:
        raise UserError(failed)
    return 1 if mismatches else 0
