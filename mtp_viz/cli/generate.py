"""`mtp-viz generate`: run one prompt and show how each token was decided.

Default output streams the text with tokens styled by kind (accepted drafts, the
target's own tokens, rejected drafts struck through), then one summary line.
``--jsonl`` prints exactly one JSON object per event per line and nothing else.
``--server URL`` streams from a vLLM server instead: both are sources
(:mod:`mtp_viz.sources.base`), and the rest of this module never asks which.
"""
from __future__ import annotations

import argparse
import itertools
import json
import os
import sys

from mtp_viz.analysis.terminal import print_styled
from mtp_viz.engine.decoding import Sampling
from mtp_viz.engine.events import Error
from mtp_viz.engine.schedules import SCHEDULES
from mtp_viz.errors import UserError
from mtp_viz.sources.settings import DEFAULT_DRAFT_TOKENS, DEFAULT_MAX_NEW_TOKENS, RunSettings

from .flags import add_engine_argument, add_precision_arguments, add_weights_argument, compile_progress, engine_of

# The most new tokens one command may ask for, checked before a model loads: the compiled
# engine's largest cache (mtp_viz.engine.compiled.CAPACITIES), and minutes of decoding on a
# CPU. A model's own context is checked too, once it has loaded.
MAX_NEW_TOKENS = 8192


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--target", default="tiny",
                   help="preset (tiny, e2b, e4b, 12b, 31b, 26b-a4b), hub id or local folder (default: tiny)")
    g = p.add_mutually_exclusive_group()
    g.add_argument("--drafter", help="drafter hub id or folder (default: the target's MTP assistant)")
    g.add_argument("--prompt-lookup", action="store_true", help="draft by n-gram lookup, no second model")
    p.add_argument("--prompt", required=True, help="the prompt text")
    p.add_argument("--max-new-tokens", type=int, default=DEFAULT_MAX_NEW_TOKENS,
                   help=f"1 to {MAX_NEW_TOKENS} (default {DEFAULT_MAX_NEW_TOKENS}, as the app)")
    p.add_argument("--draft-tokens", type=int, default=None,
                   help=f"initial draft length (default {DEFAULT_DRAFT_TOKENS}, as the app)")
    p.add_argument("--schedule", default="constant", help=", ".join(SCHEDULES))
    p.add_argument("--temperature", type=float, default=0.0, help="0 means greedy (default)")
    p.add_argument("--top-p", type=float, default=1.0)
    p.add_argument("--top-k", type=int, default=0)
    p.add_argument("--seed", type=int, default=None)
    p.add_argument("--autoregressive", action="store_true", help="plain decoding, no drafter")
    p.add_argument("--no-chat-template", action="store_true", help="feed the prompt as raw text")
    p.add_argument("--jsonl", action="store_true", help="one JSON event per line on stdout")
    p.add_argument("--device", default=None, help="cpu, cuda, mps (default: best available)")
    add_precision_arguments(p)
    add_weights_argument(p)
    p.add_argument("--color", choices=["auto", "always", "never"], default="auto")
    p.add_argument("--server", metavar="URL",
                   help="stream from a vLLM or llama.cpp server (recognised by what it answers) instead of "
                        "the local engine")
    p.add_argument("--threads", type=int, default=None,
                   help="torch CPU threads for the local engine (default: MTP_VIZ_THREADS, else one less "
                        "than this machine's cores, at most 8: the app's default, so both time alike)")
    p.add_argument("--model", help="with --server: the served model's name (default: its first)")
    p.add_argument("--experts", action="store_true",
                   help="a mixture-of-experts target (26b-a4b): put on every step event the distinct experts "
                        "each layer's router sent that forward's tokens to (experts_per_layer)")
    add_engine_argument(p, "what decodes (every graph this run can meet compiled before its first token, "
                           "each one reported on stderr)")
    p.add_argument("--stale-kv", action="store_true", help=argparse.SUPPRESS)


def run(args: argparse.Namespace) -> int:
    s = settings(args).validate(MAX_NEW_TOKENS)  # a bad setting is refused before a model loads
    source = open_source(args, s)
    events = source.events(s)
    first = next(events, None)  # the run's own checks (prompt, context) fail before any output
    events = itertools.chain([first] if first else [], events)
    color = args.color == "always" or (args.color == "auto" and sys.stdout.isatty()
                                       and not os.environ.get("NO_COLOR"))
    try:
        if args.jsonl:
            for e in events:
                print(json.dumps(e.to_dict(), ensure_ascii=False), flush=True)
        else:
            print_styled(events, color)
    except UserError as e:  # e.g. out of memory mid-run: the stream ends with an error event
        if args.jsonl:
            print(json.dumps(Error(str(e)).to_dict()), flush=True)
        raise
    return 0


def settings(args: argparse.Namespace) -> RunSettings:
    return RunSettings(
        args.prompt, modes=("autoregressive" if args.autoregressive else "speculative",),
        drafter="lookup" if args.prompt_lookup else "auto", max_new_tokens=args.max_new_tokens,
        draft_tokens=DEFAULT_DRAFT_TOKENS if args.draft_tokens is None else args.draft_tokens, schedule=args.schedule,
        sampling=Sampling(args.temperature, args.top_k, args.top_p, args.seed),
        chat=not args.no_chat_template, stale_kv=args.stale_kv, experts=args.experts)


def open_source(args: argparse.Namespace, s: RunSettings | None = None):
    """The local engine on ``--target`` (``--engine``; one that compiles, compiled for the run
    of ``s``, every graph it can meet, before its first token), or the vLLM server at ``--server``
    (whose drafter and draft length were fixed when it started)."""
    from mtp_viz import sources
    if args.server:
        if args.experts:
            raise UserError("--experts applies to the local engine: a vLLM server does not report which "
                            "experts its router chose.")
        local = [flag for flag, on in (("--drafter", args.drafter), ("--prompt-lookup", args.prompt_lookup),
                                       ("--draft-tokens", args.draft_tokens is not None),
                                       ("--schedule", args.schedule != "constant"),
                                       ("--device", args.device), ("--dtype", args.dtype),
                                       ("--target-precision", args.target_precision),
                                       (args.engine_flag, args.engine is not None),
                                       ("--threads", args.threads is not None),
                                       ("--drafter-precision", args.drafter_precision),
                                       ("--weights", args.weights != "real")) if on]
        if local:
            raise UserError(f"{local[0]} applies to the local engine; a server's drafter, draft length "
                            "and threads are set when the server starts.")
        return sources.open_source(server=args.server, model=args.model)
    if args.model:
        raise UserError("--model names a model served by --server; use --target for a local model.")
    engine = engine_of(args)   # checked before a model loads
    from mtp_viz.sources.models import default_threads, set_threads
    threads = default_threads() if args.threads is None else args.threads
    if not 1 <= threads <= (os.cpu_count() or 1):
        raise UserError(f"--threads must be a whole number from 1 to {os.cpu_count() or 1}.")
    set_threads(threads)
    if not sys.stderr.isatty():  # keep stderr to one line per error when piped
        from transformers.utils import logging as hf_logging
        hf_logging.disable_progress_bar()
    source = sources.open_source(args.target, args.drafter, device=args.device, dtype=args.dtype,
                                 target_precision=args.target_precision, drafter_precision=args.drafter_precision,
                                 drafter_kind="lookup" if args.prompt_lookup or args.autoregressive else "auto",
                                 weights=args.weights)
    if source.pair.weights_label:
        print(f"mtp-viz: {source.pair.target_id}: {source.pair.weights_label}", file=sys.stderr)
    from mtp_viz.engine.engines import ENGINES
    pair = source.pair
    pair.use(engine, settings=[s] if s is not None else (), progress=compile_progress("mtp-viz"))
    if pair.compile_note or ENGINES[engine].compiles:
        print(f"mtp-viz: {pair.compile_note}" if pair.compile_note else
              f"mtp-viz: compiled in {pair.compile_seconds:.1f} s (not in the run's timing)", file=sys.stderr)
    return source
