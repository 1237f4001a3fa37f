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
``--server URL`` benches a vLLM server instead (:mod:`mtp_viz.cli.bench_server`).
"""
from __future__ import annotations

import argparse
import sys
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from mtp_viz.engine.schedules import ScheduleCache
from mtp_viz.errors import UserError
from mtp_viz.prompts import load_prompts

from .bench_report import Record

QUICK = dict(max_new_tokens=24, repeats=1, draft_tokens=(2, 4), per_category=1)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--target", default="tiny", help="target model: hub id, local folder or 'tiny'")
    p.add_argument("--drafter", default=None, help="MTP assistant (default: the target's usual one)")
    p.add_argument("--dtype", default=None, help="bfloat16, float16 or float32 (default: bfloat16 on a GPU, "
                   "float32 on a CPU, which takes twice the memory)")
    p.add_argument("--prompts", default=None,
                   help="prompt suite JSON (default: the bundled category suite, mtp_viz/assets/prompts.json)")
    p.add_argument("--categories", default=None, help="comma-separated categories to keep")
    p.add_argument("--per-category", type=int, default=0,
                   help="use at most this many prompts per category (0: all)")
    p.add_argument("--draft-tokens", default=None,
                   help="comma-separated draft lengths for the constant schedule (default 1,2,4,8)")
    p.add_argument("--schedules", default="constant,heuristic,optimal",
                   help="comma-separated schedules; adaptive ones start from the median draft length")
    p.add_argument("--max-draft-tokens", type=int, default=16, help="cap for adaptive schedules")
    p.add_argument("--repeats", type=int, default=None, help="timed repeats (default 3)")
    p.add_argument("--max-new-tokens", type=int, default=None, help="tokens per run (default 64)")
    p.add_argument("--temperature", type=float, default=0.0,
                   help="0 = greedy (default); above 0 the reference and parity checks are skipped")
    p.add_argument("--seed", type=int, default=0, help="sampling seed (temperature > 0)")
    p.add_argument("--stale-kv", action="store_true",
                   help="give our drafter transformers' stale KV entry after a rejection")
    p.add_argument("--threads", type=int, default=0,
                   help="torch CPU threads for the run (default: torch's own choice); 1 is "
                        "steadier on a busy machine")
    p.add_argument("--no-chat", action="store_true", help="feed prompts without the chat template")
    p.add_argument("--out", default="bench-results", help="folder for bench.json/.md/.html")
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
    if not gammas or min(gammas) < 1:
        raise UserError("--draft-tokens must list draft lengths of at least 1.")
    names = [s.strip() for s in schedules.split(",") if s.strip()]
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
        self.target, self.assistant = pair.target, pair.drafter_model
        self.n, self.sampling, self.stale_kv = max_new_tokens, sampling, stale_kv
        self.cap = max_draft_tokens
        self.eos = tuple(pair.eos_token_ids or ())
        self.forwards = 0
        self._hook = self.target.register_forward_pre_hook(self._count)
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
        # Step 1 is the prefill in both of our modes: its time, to separate out decoding.
        prefill = next((e.verify_seconds for e in events if isinstance(e, Step)), 0.0)
        return Record("", seconds, done.new_tokens, done.target_forwards, tuple(done.generated_ids),
                      cpu_seconds=cpu, prefill_seconds=prefill), events

    def reference(self, ids: list[int], gamma: int, n: int | None = None):
        import torch
        gc = self.assistant.generation_config
        saved = (gc.num_assistant_tokens, gc.num_assistant_tokens_schedule)
        gc.num_assistant_tokens, gc.num_assistant_tokens_schedule = gamma, "constant"
        x = torch.tensor([ids], device=self.target.device)
        eos = list(self.eos) or None
        pad = self.target.generation_config.pad_token_id
        try:
            self.forwards = 0
            t, cpu = time.perf_counter(), time.process_time()
            with torch.inference_mode():
                out = self.target.generate(
                    input_ids=x, attention_mask=torch.ones_like(x), assistant_model=self.assistant,
                    do_sample=False, max_new_tokens=n or self.n, eos_token_id=eos,
                    pad_token_id=pad if pad is not None else (eos[0] if eos else 0))
            seconds, cpu = time.perf_counter() - t, time.process_time() - cpu
        finally:
            gc.num_assistant_tokens, gc.num_assistant_tokens_schedule = saved
        gen = out[0, len(ids):].tolist()
        return Record("reference", seconds, len(gen), self.forwards, tuple(gen), cpu_seconds=cpu), None


def run(args: argparse.Namespace) -> int:
    if args.server or args.baseline_server:
        if args.draft_tokens or args.drafter or args.stale_kv or args.dtype:
            raise UserError("--draft-tokens, --drafter, --dtype and --stale-kv apply to the local engine; a "
                            "vLLM server's drafter, draft length and dtype are set when it starts.")
        from .bench_server import run as run_server
        return run_server(args)
    quick = args.quick
    n = args.max_new_tokens or (QUICK["max_new_tokens"] if quick else 64)
    repeats = args.repeats or (QUICK["repeats"] if quick else 3)
    per_category = args.per_category or (QUICK["per_category"] if quick else 0)
    if n < 1 or repeats < 1:
        raise UserError("--max-new-tokens and --repeats must be at least 1.")
    prompts = load_prompts(args.prompts, args.categories, per_category)
    settings = parse_settings(args.draft_tokens, args.schedules, quick)
    greedy = args.temperature <= 0

    import torch

    from mtp_viz.engine.decoding import Sampling
    sampling = Sampling(temperature=max(args.temperature, 0.0), seed=None if greedy else args.seed)
    threads = torch.get_num_threads()
    if args.threads > 0:
        torch.set_num_threads(args.threads)
    try:
        return _run(args, sampling, prompts, settings, n, repeats, quick, greedy)
    finally:
        torch.set_num_threads(threads)


def _run(args, sampling, prompts, settings, n, repeats, quick, greedy) -> int:
    from mtp_viz.sources.models import load_pair

    from . import bench_report
    t_load = time.perf_counter()
    pair = load_pair(args.target, args.drafter, dtype=args.dtype)
    if pair.drafter_model is None:
        raise UserError("The bench needs an MTP drafter; pass --drafter.")
    drafter = pair.make_drafter("mtp")
    runner = Runner(pair, drafter, n, sampling, args.stale_kv, args.max_draft_tokens)
    print(f"mtp-viz bench: loaded {args.target} in {time.perf_counter() - t_load:.1f} s; "
          f"{len(prompts)} prompts x {len(settings)} settings x {repeats} repeats, "
          f"{n} new tokens each", file=sys.stderr)
    encoded = [pair.encode(p.text, chat=not args.no_chat) for p in prompts]

    tasks: list[tuple[str, Setting | None]] = [("autoregressive", None)]
    if greedy:
        tasks += [("reference", s) for s in settings if s.schedule == "constant"]
    tasks += [("ours", s) for s in settings]

    def one(mode, setting, ids, limit=None):
        if mode == "autoregressive":
            return runner.autoregressive(ids, limit)
        if mode == "reference":
            return runner.reference(ids, setting.gamma, limit)
        return runner.ours(ids, setting, limit)

    records: list[dict[str, Any]] = []
    events: dict[tuple[str, str], list] = {}
    from tqdm.auto import tqdm
    bar = tqdm(total=repeats * len(prompts) * len(tasks), desc="bench", unit="run",
               file=sys.stderr, disable=args.no_progress, dynamic_ncols=True)
    mismatches = 0
    try:
        # Warm-up (untimed): first calls pay for lazy initialisation.
        for mode, setting in tasks:
            one(mode, setting, encoded[0], min(n, 8))
        for r in range(repeats):
            for i, (prompt, ids) in enumerate(zip(prompts, encoded)):
                shift = (r * len(prompts) + i) % len(tasks)
                order = tasks[shift:] + tasks[:shift]
                done: dict[tuple[str, str], dict] = {}
                for mode, setting in order:
                    rec, ev = one(mode, setting, ids)
                    rec = replace(rec, mode=mode, setting=setting.name if setting else "",
                                  schedule=setting.schedule if setting else "",
                                  gamma=setting.gamma if setting else 0, prompt_id=prompt.id,
                                  category=prompt.category, repeat=r, prompt_tokens=len(ids))
                    done[(mode, rec.setting)] = rec
                    if ev is not None:
                        events.setdefault((mode, rec.setting), []).append((prompt, r, ev))
                    bar.update(1)
                if greedy:
                    mismatches += _check_parity(done, prompt.id, r, bar)
                records.extend(done.values())
    finally:
        bar.close()
        runner.close()
    meta = {
        "target": args.target, "drafter": args.drafter, "dtype": str(pair.target.dtype).removeprefix("torch."),
        "max_new_tokens": n, "repeats": repeats,
        "prompts": len(prompts), "settings": [s.name for s in settings],
        "temperature": sampling.temperature, "stale_kv": args.stale_kv, "chat": not args.no_chat,
        "quick": quick, "parity_failures": mismatches, **bench_report.environment(),
    }
    result = bench_report.reduce(meta, records, events, settings)
    out = Path(args.out)
    paths = bench_report.write(result, out)
    print(bench_report.markdown(result))
    print(f"wrote {', '.join(str(p) for p in paths)}", file=sys.stderr)
    if mismatches:
        print(f"mtp-viz bench: PARITY FAILURE: {mismatches} greedy run(s) differ from "
              "transformers' reference output (see 'parity' in bench.json)", file=sys.stderr)
        return 1
    return 0


def _check_parity(done: dict, prompt_id: str, repeat: int, bar) -> int:
    """Each greedy run of ours must equal the reference with the same draft length.

    Marks every record with ``parity`` (True/False, or None where no reference ran) and
    ``matches_autoregressive``; returns the number of failures."""
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
            failures += 1
            first = next((k for k, (a, b) in enumerate(zip(rec.ids, ref.ids)) if a != b),
                         min(len(rec.ids), len(ref.ids)))
            rec.first_difference = first
            bar.write(f"MISMATCH {name} on {prompt_id} (repeat {repeat}): ours differs from "
                      f"transformers at new token {first}: {list(rec.ids[first:first + 5])} vs "
                      f"{list(ref.ids[first:first + 5])}", file=sys.stderr)
    return failures
