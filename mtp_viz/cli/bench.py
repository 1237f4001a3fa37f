"""`mtp-viz bench`: speedup, acceptance and overhead, held against the theory.

Every prompt runs in three modes:

- ``autoregressive``: our engine's plain decoding, the baseline for every speedup;
- ``reference``: transformers' own assisted decoding,
  ``target.generate(ids, assistant_model=drafter, do_sample=False)``, with the draft
  length set through ``assistant_model.generation_config.num_assistant_tokens`` (the
  only knob transformers honours for this drafter) and a constant schedule;
- ``ours``: :func:`mtp_viz.engine.loop.speculative`, for every setting (schedule × draft
  length).

Runs alternate: within each repeat, each prompt runs every mode and setting once, in
an order rotated from prompt to prompt and repeat to repeat, so slow drift of the
machine (thermal, other jobs) falls on all modes alike. Wall times are measured around
the whole call (our event stream included, without detokenization, as transformers
does none either). Greedy runs must reproduce the reference token for token; a
mismatch is reported loudly and makes the command exit with status 1.

The numbers are reduced by :mod:`mtp_viz.cli.bench_report` (table, JSON, HTML report).
``--precisions T/D,...`` runs several precision pairs in the same run, each reduced
against its own target's plain decoding (:mod:`mtp_viz.cli.bench_precision`).
``--server URL`` benches a vLLM server instead (:mod:`mtp_viz.cli.bench_server`).
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from mtp_viz.engine.decoding import Sampling
from mtp_viz.engine.schedules import ScheduleCache
from mtp_viz.errors import UserError
from mtp_viz.prompts import Prompt, load_prompts
from mtp_viz.sources.precision import Precision
from mtp_viz.sources.settings import MAX_DRAFT_TOKENS, RunSettings

from . import bench_precision, bench_report
from .bench_report import Record
from .generate import MAX_NEW_TOKENS

QUICK = dict(max_new_tokens=24, repeats=1, draft_tokens=(2, 4), per_category=1)
MAX_REPEATS = 100      # timed repeats of every run
DEFAULT_SCHEDULES = "constant,heuristic,optimal"
SERVER_ONLY = ("--model", "--baseline-model", "--concurrency", "--requests")


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--target", default="tiny", help="target model: hub id, local folder or 'tiny'")
    p.add_argument("--drafter", default=None, help="MTP assistant (default: the target's usual one)")
    from .generate import add_precision_arguments
    add_precision_arguments(p)
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
    p.add_argument("--threads", type=int, default=0,
                   help="torch CPU threads for the run, at most this machine's cores (default 0: torch's "
                        "own choice); 1 is steadier on a busy machine")
    p.add_argument("--no-chat", action="store_true", help="feed prompts without the chat template")
    p.add_argument("--compile", action="store_true",
                   help="measure the compiled engine beside the eager one, interleaved in the same run "
                        "(every row says which: engine eager or compiled; compile time reported apart)")
    p.add_argument("--out", default="bench-results",
                   help="folder for bench.json/.md/.html, checked (or made) before the first run")
    p.add_argument("--force", action="store_true",
                   help="overwrite the results of an earlier bench in --out (without it, such a folder is refused)")
    p.add_argument("--quick", action="store_true",
                   help="smoke run: one prompt per category, 24 tokens, draft lengths 2,4, one repeat")
    p.add_argument("--no-progress", action="store_true", help="no progress bar on stderr")
    from .bench_server import add_arguments as add_server_arguments
    add_server_arguments(p)


@dataclass(frozen=True)
class Setting:
    schedule: str
    gamma: int          # constant draft length, or the adaptive schedule's first length

    @property
    def name(self) -> str:
        return f"{self.schedule}-{self.gamma}"


def parse_settings(draft_tokens: str | None, schedules: str, quick: bool) -> list[Setting]:
    from mtp_viz.engine.schedules import SCHEDULES
    try:
        gammas = ([int(x) for x in draft_tokens.split(",") if x.strip()] if draft_tokens
                  else list(QUICK["draft_tokens"] if quick else (1, 2, 4, 8)))
    except ValueError as e:
        raise UserError("--draft-tokens must be comma-separated whole numbers, like 1,2,4,8.") from e
    if not gammas:
        raise UserError("--draft-tokens must list draft lengths, like 1,2,4,8.")
    names = [s.strip() for s in schedules.split(",") if s.strip()]
    if not names:
        raise UserError(f"--schedules must list schedules, like {','.join(SCHEDULES)}.")
    for s in names:
        if s not in SCHEDULES:
            raise UserError(f"Unknown schedule {s!r}; choose from {', '.join(SCHEDULES)}.")
    gammas = sorted(set(gammas))
    start = gammas[len(gammas) // 2]
    out = []
    for s in names:
        out += [Setting(s, g) for g in gammas] if s == "constant" else [Setting(s, start)]
    return out


class Runner:
    """Runs one mode on one prompt and returns a record (a plain dict) plus events."""

    def __init__(self, pair, drafter, max_new_tokens: int, sampling, stale_kv: bool,
                 max_draft_tokens: int):
        self.pair, self.drafter = pair, drafter
        self.target, self.assistant = pair.decoder, pair.drafter_model   # decoder: compiled or the model
        self.n, self.sampling, self.stale_kv = max_new_tokens, sampling, stale_kv
        self.cap = max_draft_tokens
        self.eos = tuple(pair.eos_token_ids or ())
        self.forwards = 0
        self._hook = pair.target.register_forward_pre_hook(self._count)  # counts the reference's forwards
        self.schedules = ScheduleCache()  # one per setting, carried across runs

    def close(self) -> None:
        self._hook.remove()

    def _count(self, module, args):
        self.forwards += 1

    def autoregressive(self, ids: list[int], n: int | None = None):
        from mtp_viz.engine.loop import autoregressive
        return self._consume(autoregressive(self.target, ids, max_new_tokens=n or self.n,
                                            sampling=self.sampling, eos_token_ids=self.eos))

    def ours(self, ids: list[int], setting: Setting, n: int | None = None):
        from mtp_viz.engine.loop import speculative
        schedule = self.schedules.get(setting.schedule, self.drafter.kind, setting.gamma,
                                      max(self.cap, setting.gamma))
        return self._consume(speculative(
            self.target, self.drafter, ids, max_new_tokens=n or self.n, sampling=self.sampling,
            schedule=schedule, max_draft_tokens=max(self.cap, setting.gamma),
            eos_token_ids=self.eos, stale_kv=self.stale_kv))

    def _consume(self, stream):
        from mtp_viz.engine.events import Done, Step
        t, cpu = time.perf_counter(), time.process_time()
        events = list(stream)
        seconds, cpu = time.perf_counter() - t, time.process_time() - cpu
        done = events[-1]
        if not isinstance(done, Done):
            raise RuntimeError(f"engine stopped without a done event: {done!r}")
        # a graph the compiled engine compiled in this call (a shape first seen) is not decoding
        seconds, cpu = seconds - done.compile_seconds, cpu - done.compile_seconds
        # Step 1 is the prefill in both of our modes: its time, to separate out decoding.
        prefill = next((e.verify_seconds for e in events if isinstance(e, Step)), 0.0)
        return Record("", seconds, done.new_tokens, done.target_forwards, tuple(done.generated_ids),
                      cpu_seconds=cpu, prefill_seconds=prefill), events

    def reference(self, ids: list[int], gamma: int, n: int | None = None):
        import torch
        gc = self.assistant.generation_config
        saved = (gc.num_assistant_tokens, gc.num_assistant_tokens_schedule)
        gc.num_assistant_tokens, gc.num_assistant_tokens_schedule = gamma, "constant"
        model = self.pair.target
        x = torch.tensor([ids], device=model.device)
        eos = list(self.eos) or None
        pad = model.generation_config.pad_token_id
        try:
            self.forwards = 0
            t, cpu = time.perf_counter(), time.process_time()
            with torch.inference_mode():
                out = model.generate(
                    input_ids=x, attention_mask=torch.ones_like(x), assistant_model=self.assistant,
                    do_sample=False, max_new_tokens=n or self.n, eos_token_id=eos,
                    pad_token_id=pad if pad is not None else (eos[0] if eos else 0))
            seconds, cpu = time.perf_counter() - t, time.process_time() - cpu
        finally:
            gc.num_assistant_tokens, gc.num_assistant_tokens_schedule = saved
        gen = out[0, len(ids):].tolist()
        return Record("reference", seconds, len(gen), self.forwards, tuple(gen), cpu_seconds=cpu), None


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

    @property
    def greedy(self) -> bool:
        return self.sampling.greedy


def check(args: argparse.Namespace) -> Plan:
    """Every flag of the bench, checked once and before any model loads or server is
    asked: the first bad one is one sentence. Run settings are checked as every run's
    are (:meth:`mtp_viz.sources.settings.RunSettings.validate`)."""
    from . import bench_traffic
    server = bool(args.server or args.baseline_server)
    if server:
        local = [flag for flag, on in (
            ("--draft-tokens", args.draft_tokens), ("--drafter", args.drafter), ("--dtype", args.dtype),
            ("--target-precision", args.target_precision), ("--drafter-precision", args.drafter_precision),
            ("--precisions", args.precisions), ("--compile", args.compile), ("--stale-kv", args.stale_kv),
            ("--schedules", args.schedules != DEFAULT_SCHEDULES),
            ("--max-draft-tokens", args.max_draft_tokens != MAX_DRAFT_TOKENS), ("--threads", args.threads))
            if on]
        if local:
            raise UserError(f"{local[0]} applies to the local engine; a vLLM server's drafter, draft length, "
                            "precision, compilation and threads are set when it starts.")
        if not args.server:
            raise UserError("--baseline-server needs --server, the speculating server to compare.")
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
    _between("--threads", args.threads, 0, os.cpu_count() or 1, " (0: torch's own choice)")
    levels = requests = None
    if args.concurrency is not None:
        if not args.baseline_server:
            raise UserError("--concurrency compares two servers: give --baseline-server too.")
        levels = bench_traffic.parse_levels(args.concurrency)
    if args.requests is not None:
        if levels is None:
            raise UserError("--requests sets the requests per level of --concurrency; give --concurrency too.")
        requests = _between("--requests", args.requests, 1, bench_traffic.MAX_REQUESTS)
    prompts = load_prompts(args.prompts, args.categories, per_category)
    settings = parse_settings(args.draft_tokens, args.schedules, quick)
    sampling = Sampling(args.temperature, seed=args.seed)
    for s in settings:  # as each run's settings will be: a bad one is refused before a model loads
        RunSettings(prompts[0].text, max_new_tokens=n, draft_tokens=s.gamma, schedule=s.schedule,
                    sampling=sampling, chat=not args.no_chat).validate(MAX_NEW_TOKENS)
    precisions = [] if server else bench_precision.parse(args)  # every name checked before a model loads
    if sampling.greedy:
        sampling = Sampling()  # the seed is for sampling only
    return Plan(n, repeats, prompts, settings, precisions, sampling, levels, requests)


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
    threads = torch.get_num_threads()
    if args.threads > 0:
        torch.set_num_threads(args.threads)
    try:
        return _run(args, plan.sampling, plan.prompts, plan.settings, plan.precisions, plan.n, plan.repeats,
                    args.quick, plan.greedy)
    finally:
        torch.set_num_threads(threads)


def _arms(args, precisions, n, sampling) -> list[bench_precision.Arm]:
    """Each precision pair loaded (every model once per precision) with its runner."""
    from mtp_viz.sources.models import load_pairs
    t_load = time.perf_counter()
    pairs = load_pairs(args.target, args.drafter, precisions)
    if pairs[0].drafter_model is None:
        raise UserError("The bench needs an MTP drafter; pass --drafter.")
    if len({tuple(p.precision.values()) for p in pairs}) < len(pairs):  # e.g. float32/float32 and default/default
        raise UserError("--precisions lists a pair twice (a default is this device's float32 or bfloat16).")
    print(f"mtp-viz bench: loaded {args.target} in {time.perf_counter() - t_load:.1f} s", file=sys.stderr)
    if args.compile:
        pairs = pairs + bench_precision.compiled(pairs)
    arms = [bench_precision.Arm(Precision(**p.precision), p,
                                Runner(p, p.make_drafter("mtp"), n, sampling, args.stale_kv, args.max_draft_tokens),
                                engine=p.engine, several_engines=args.compile)
            for p in pairs]
    print(f"mtp-viz bench: arms {', '.join(a.label for a in arms)}", file=sys.stderr)
    return arms


def _tasks(arms, settings, greedy) -> list[tuple[str, Any, Setting | None]]:
    """(mode, arm, setting): one plain run per distinct target, then each arm's reference
    (greedy, constant schedules, where transformers runs the pair) and its settings."""
    plain = {(a.precision.target, a.engine): a for a in arms}
    tasks: list[tuple[str, Any, Setting | None]] = [("autoregressive", a, None) for a in plain.values()]
    for a in arms:
        if greedy and a.has_reference and a.engine == "eager":  # transformers' run: one per pair, not per engine
            tasks += [("reference", a, s) for s in settings if s.schedule == "constant"]
        tasks += [("ours", a, s) for s in settings]
    return tasks


def _one(mode, arm, setting, ids, limit=None):
    if mode == "autoregressive":
        return arm.runner.autoregressive(ids, limit)
    if mode == "reference":
        return arm.runner.reference(ids, setting.gamma, limit)
    return arm.runner.ours(ids, setting, limit)


def _run(args, sampling, prompts, settings, precisions, n, repeats, quick, greedy) -> int:
    from . import bench_report
    arms = _arms(args, precisions, n, sampling)
    tasks = _tasks(arms, settings, greedy)
    print(f"mtp-viz bench: {len(prompts)} prompts x {len(settings)} settings x {len(arms)} arm(s) x "
          f"{repeats} repeats, {n} new tokens each", file=sys.stderr)
    encoded = [arms[0].pair.encode(p.text, chat=not args.no_chat) for p in prompts]
    records: list[Record] = []
    events: dict[tuple, list] = {}
    from tqdm.auto import tqdm
    bar = tqdm(total=repeats * len(prompts) * len(tasks), desc="bench", unit="run",
               file=sys.stderr, disable=args.no_progress, dynamic_ncols=True)
    mismatches = 0
    try:
        for mode, arm, setting in tasks:  # warm-up (untimed): first calls pay for lazy initialisation
            _one(mode, arm, setting, encoded[0], min(n, 8))
        for r in range(repeats):
            for i, (prompt, ids) in enumerate(zip(prompts, encoded)):
                shift = (r * len(prompts) + i) % len(tasks)
                done: dict[tuple, Record] = {}
                for mode, arm, setting in tasks[shift:] + tasks[:shift]:
                    rec, ev = _one(mode, arm, setting, ids)
                    t, d = arm.precision.target, arm.precision.drafter if mode != "autoregressive" else None
                    rec = replace(rec, mode=mode, setting=setting.name if setting else "",
                                  schedule=setting.schedule if setting else "",
                                  gamma=setting.gamma if setting else 0, prompt_id=prompt.id,
                                  category=prompt.category, repeat=r, prompt_tokens=len(ids),
                                  target_precision=t, drafter_precision=d,
                                  engine=arm.engine if mode != "reference" else None)
                    done[(mode, rec.setting, t, d, rec.engine)] = rec
                    if ev is not None:
                        events.setdefault((mode, rec.setting, t, d, rec.engine), []).append((prompt, r, ev))
                    bar.update(1)
                if greedy:
                    mismatches += sum(_check_parity(_arm_runs(done, a), prompt.id, r, bar, a.exact, a.label)
                                      for a in arms)
                records.extend(done.values())
    finally:
        bar.close()
        for a in arms:
            a.runner.close()
    meta = {
        "target": args.target, "drafter": args.drafter,
        "dtype": str(arms[0].pair.target.dtype).removeprefix("torch."), "precisions": [a.label for a in arms],
        "max_new_tokens": n, "repeats": repeats,
        "prompts": len(prompts), "settings": [s.name for s in settings],
        "temperature": sampling.temperature, "stale_kv": args.stale_kv, "chat": not args.no_chat,
        "quick": quick, "parity_failures": mismatches, **bench_report.environment(),
        "engines": sorted({a.engine for a in arms}),
        "compile_seconds": {a.label: round(a.pair.compile_seconds, 2) for a in arms if a.engine == "compiled"},
    }
    result = bench_precision.reduce(meta, records, events, settings, arms, greedy)
    by_precision = bench_precision.markdown(result)
    paths, failed = bench_report.write(result, Path(args.out), by_precision)
    print(bench_report.markdown(result, by_precision))
    print(f"wrote {', '.join(str(p) for p in paths)}", file=sys.stderr)
    if mismatches:
        print(f"mtp-viz bench: PARITY FAILURE: {mismatches} greedy run(s) differ from "
              "transformers' reference output (see 'parity' in bench.json)", file=sys.stderr)
    if failed:
        raise UserError(failed)
    return 1 if mismatches else 0


def _arm_runs(done: dict, arm) -> dict[tuple[str, str], Record]:
    """One prompt's runs of ``arm`` (and its target's plain run), by (mode, setting)."""
    t, d = arm.precision.target, arm.precision.drafter
    return {(mode, name): rec for (mode, name, rt, rd, engine), rec in done.items()
            if rt == t and (mode == "autoregressive" or rd == d) and engine in (arm.engine, None)}


def _check_parity(done: dict, prompt_id: str, repeat: int, bar, exact: bool = True, label: str = "") -> int:
    """Each greedy run of ours must equal the reference with the same draft length.

    Marks every record with ``parity`` (True/False, or None where no reference ran) and
    ``matches_autoregressive``; returns the number of failures. With ``exact=False`` (a
    target computing in bfloat16 or float16, where verification rounds differently from
    one token at a time) a difference is marked and reported, not counted."""
    ar = done.get(("autoregressive", ""))
    failures = 0
    for (mode, name), rec in done.items():
        if mode != "ours":
            continue
        ref = done.get(("reference", name))
        rec.matches_autoregressive = ar is not None and rec.ids == ar.ids
        if ref is None:
            continue
        rec.parity = rec.ids == ref.ids
        if not rec.parity:
            failures += exact
            first = next((k for k, (a, b) in enumerate(zip(rec.ids, ref.ids)) if a != b),
                         min(len(rec.ids), len(ref.ids)))
            rec.first_difference = first
            what = "MISMATCH" if exact else "differs (rounding of a non-float32 target, not a failure)"
            bar.write(f"{what} {name}{' ' + label if label else ''} on {prompt_id} (repeat {repeat}): ours "
                      f"differs from transformers at new token {first}: {list(rec.ids[first:first + 5])} vs "
                      f"{list(ref.ids[first:first + 5])}", file=sys.stderr)
    return failures
