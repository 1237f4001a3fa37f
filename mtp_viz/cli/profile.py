"""`mtp-viz profile`: what each forward of a pair costs here, and what that predicts.

Times the target's plain step, its verification at every width γ + 1 up to
``--max-draft-tokens`` + 1, one draft of the assistant and the prefill, on the eager engine
(and beside it the one ``--engine`` names: ``--engine compiled``, or its alias
``--compile``); predicts the speedup over the fastest plain decoder for every acceptance
and draft length, with the break-even acceptance and the best draft length
(:mod:`mtp_viz.analysis.payoff`); and measures whole runs at set acceptances (``--alphas``:
the real drafter runs, every forward real, only its proposals are set:
:mod:`mtp_viz.engine.drafters.scripted`) to check the prediction, and predicts the speedup at
every published acceptance too (:mod:`mtp_viz.analysis.published`: each row labelled with the
model size it was published for). ``--weights random``
builds a preset at its real shape with random weights: nothing is downloaded but a config;
given no precision (``--dtype``, ``--target-precision``, ``--drafter-precision``) such a
pair loads in the precision fastest on the machine (:func:`mtp_viz.sources.precision.fastest`:
bfloat16 where the CPU computes it natively, else int8 weight-only), the bundled tiny pair
and real checkpoints in their usual default; the profile says which and why.

``--engine llama.cpp --gguf DIR``: the same study on llama.cpp instead
(:mod:`mtp_viz.measure.llamacpp_profile`), of the pair ``mtp-viz gguf`` exported to DIR (for
``--weights random``, the same random weights): its plain step, verifications of 1 to
``--max-draft-tokens`` + 1 tokens and drafter from its own timings, each ``llama-server``
(``--llama-server``, ``MTP_VIZ_LLAMA_SERVER`` or scripts/llamacpp.sh's build) started and
stopped here, one at a time, at ``--threads``; the predicted speedup over llama.cpp's own
plain decoding, and MTP runs it measures at α ≈ 0 (the random drafter) and at each
``--alphas`` (its synthetic acceptance) beside their predictions.

``--precisions bfloat16,int8,float32``: then, the pair once more in each of those precisions
in turn (one resident at a time), its plain step, its verification at γ + 1 and its prefill
timed on the eager engine and on the one ``--engine`` names, side by side with the machine's
fastest precision marked (:mod:`mtp_viz.measure.precisions`); one that cannot run here is a
row saying why.

Writes ``DIR/profile.json`` (every timing, the curves, the runs; ``precisions``: the rows of
``--precisions``) and ``DIR/profile.md`` (the table printed on stdout).
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

from mtp_viz.errors import UserError, clip

PEERS = {"llama.cpp": "the same study on a llama-server serving the pair --gguf names, instead of ours"}


def add_arguments(p: argparse.ArgumentParser) -> None:
    from .flags import add_engine_argument, add_precision_arguments, add_weights_argument
    p.add_argument("--target", default="tiny",
                   help="preset (tiny, e2b, e4b, 12b, 31b, 26b-a4b), hub id or local folder (default: tiny)")
    add_weights_argument(p)
    add_precision_arguments(p)
    p.add_argument("--device", default=None, help="cpu, cuda, mps (default: best available)")
    p.add_argument("--threads", type=int, default=1, help="torch CPU threads (default 1)")
    add_engine_argument(p, "the engine profiled beside the eager one", peers=PEERS)
    p.add_argument("--gguf", default=None, metavar="DIR",
                   help="--engine llama.cpp: the folder `mtp-viz gguf` wrote (target.gguf, drafter.gguf)")
    p.add_argument("--llama-server", default=None, metavar="PATH",
                   help="--engine llama.cpp: the llama-server to start (default: MTP_VIZ_LLAMA_SERVER, or the "
                        "build scripts/llamacpp.sh keeps)")
    p.add_argument("--llama-args", default="", metavar="FLAGS",
                   help="--engine llama.cpp: more llama-server flags for every server it starts, e.g. --no-repack")
    p.add_argument("--draft-tokens", type=int, default=4, help="γ of the measured runs (default 4)")
    p.add_argument("--max-draft-tokens", type=int, default=8,
                   help="verification widths up to this many drafts + 1 (default 8)")
    p.add_argument("--alphas", default="0.5,0.7,0.9",
                   help="set acceptances of the measured runs, comma-separated, each in [0, 1] (empty: none)")
    p.add_argument("--prompt-tokens", type=int, default=32, help="prompt length in tokens (default 32)")
    p.add_argument("--max-new-tokens", type=int, default=64, help="tokens per measured run (default 64)")
    p.add_argument("--repeats", type=int, default=3, help="timed repeats (default 3)")
    p.add_argument("--precisions", default=None, metavar="LIST",
                   help="after the profile, each of these precisions' plain step side by side, comma-separated "
                        "(float32, bfloat16, float16, int8, int4; e.g. bfloat16,int8,float32): the pair loaded in "
                        "each in turn, one resident at a time, on the eager engine and the one --engine names")
    p.add_argument("--out", default="profile-results", help="folder for profile.json and profile.md")


def _alphas(text: str) -> tuple[float, ...]:
    try:
        alphas = tuple(float(a) for a in text.split(",") if a.strip())
    except ValueError as e:
        raise UserError("--alphas must be comma-separated numbers from 0 to 1, like 0.5,0.7,0.9.") from e
    if any(not 0.0 <= a <= 1.0 for a in alphas):
        raise UserError("--alphas must be comma-separated numbers from 0 to 1, like 0.5,0.7,0.9.")
    return alphas


def precision_list(text: str | None) -> tuple[str, ...]:
    """``--precisions``' names, each by its full name (aliases such as bf16 allowed), in the
    order given; none for no flag or an empty list; one sentence for an unknown name or one
    named twice."""
    from mtp_viz.sources.precision import ALIASES, CHOICES, PRECISIONS
    names: list[str] = []
    for item in (text or "").split(","):
        if not item.strip():
            continue
        name = ALIASES.get(item.strip().lower(), item.strip().lower())
        if name not in PRECISIONS:
            raise UserError(f"--precisions must list precisions ({CHOICES}), like bfloat16,int8,float32, "
                            f"not {clip(repr(item.strip()), 40)}.")
        if name in names:
            raise UserError(f"--precisions lists {name} twice.")
        names.append(name)
    return tuple(names)


def _between(flag: str, value: int, low: int, high: int) -> None:
    if not low <= value <= high:
        raise UserError(f"{flag} must be a whole number from {low} to {high}.")


def check(args: argparse.Namespace) -> tuple[float, ...]:
    """Every flag, before a model loads."""
    from mtp_viz.engine.decoding import MAX_DRAFT_TOKENS
    _between("--threads", args.threads, 1, os.cpu_count() or 1)
    _between("--max-draft-tokens", args.max_draft_tokens, 1, MAX_DRAFT_TOKENS)
    _between("--draft-tokens", args.draft_tokens, 1, args.max_draft_tokens)
    _between("--prompt-tokens", args.prompt_tokens, 1, 8192)
    _between("--max-new-tokens", args.max_new_tokens, 2, 8192)
    _between("--repeats", args.repeats, 1, 100)
    out = Path(args.out)
    if out.exists() and not out.is_dir():
        raise UserError("--out must name a folder.")
    precision_list(args.precisions)
    if getattr(args, "engine", None) in PEERS:
        folder = Path(args.gguf) if args.gguf else None
        if folder is None or not (folder / "target.gguf").is_file() or not (folder / "drafter.gguf").is_file():
            raise UserError("--engine llama.cpp needs --gguf DIR, a folder with target.gguf and drafter.gguf: "
                            "write one with `mtp-viz gguf --target TARGET --weights random --out DIR`.")
        if args.precisions:
            raise UserError("--precisions profiles mtp-viz's engines; llama.cpp's precision is its GGUF's.")
        import importlib.util
        if importlib.util.find_spec("gguf") is None:   # the export's type is read from its header
            raise UserError('--engine llama.cpp needs the gguf package: pip install "mtp-viz[gguf]".')
    elif args.gguf or args.llama_server or args.llama_args:
        raise UserError("--gguf, --llama-server and --llama-args go with --engine llama.cpp.")
    return _alphas(args.alphas)


def precision_choice(args: argparse.Namespace, device: str) -> tuple[str | None, dict]:
    """The precision both models load in (None: the pair's usual default, or what the
    flags ask) and what profile.json's ``meta.precision_choice`` says of it: how it was
    chosen (``asked``, ``machine``, ``default``), the machine's fastest and why."""
    from mtp_viz.sources.precision import fastest
    best = fastest(device)
    said = {"fastest": best.precision, "native_bfloat16": best.native_bfloat16, "why": best.why}
    if args.dtype or args.target_precision or args.drafter_precision:
        return None, {"chosen_by": "asked", **said}
    if args.weights == "random" and str(args.target).strip().lower() != "tiny":
        return best.precision, {"chosen_by": "machine", **said}
    return None, {"chosen_by": "default", **said}


def _on_engine(pair, engine: str, args: argparse.Namespace):
    """``pair`` on ``engine`` too (the same models), compiled now for a run of the profile's
    shape where it compiles; its ``compile_note`` says why it could not go there."""
    from mtp_viz.sources.settings import RunSettings

    from .flags import compile_progress
    plan = RunSettings("x" * args.prompt_tokens, max_new_tokens=args.max_new_tokens, chat=False,
                       draft_tokens=args.draft_tokens)
    return pair.on(engine, settings=[plan], progress=compile_progress("mtp-viz profile"))


def _profile(args: argparse.Namespace, device: str, engine: str, alphas: tuple[float, ...]) -> dict:
    """The main profile (:func:`mtp_viz.measure.profile.study`) of the pair in the precision
    the flags or the machine choose; its pair is let go on return."""
    from mtp_viz.engine.engines import default_engine
    from mtp_viz.measure.profile import describe, study
    from mtp_viz.sources.models import load_pair
    chosen, choice = precision_choice(args, device)
    if choice["chosen_by"] == "machine":
        print(f"mtp-viz profile: {chosen}, the fastest precision here: {choice['why']}", file=sys.stderr)
    elif not choice["native_bfloat16"]:
        print(f"mtp-viz profile: {choice['why']}", file=sys.stderr)
    t = time.perf_counter()
    pair = load_pair(args.target, device=device, dtype=args.dtype or chosen, target_precision=args.target_precision,
                     drafter_precision=args.drafter_precision, weights=args.weights)
    print(f"mtp-viz profile: {pair.target_id} ready in {time.perf_counter() - t:.1f} s"
          + (f" ({pair.weights_label})" if pair.weights_label else ""), file=sys.stderr)
    if not pair.has_mtp and alphas:
        print("mtp-viz profile: no MTP assistant: only the target's costs", file=sys.stderr)
    pairs = {default_engine(): pair}
    if engine not in pairs:
        other = _on_engine(pair, engine, args)
        if other.compile_note:
            print(f"mtp-viz profile: {other.compile_note}", file=sys.stderr)
        else:
            pairs[engine] = other
    result = study(pairs, prompt_tokens=args.prompt_tokens, new_tokens=args.max_new_tokens,
                   draft_tokens=args.draft_tokens,
                   max_draft_tokens=args.max_draft_tokens, alphas=alphas, repeats=args.repeats)
    describe(result, pair, args.target)
    result["meta"]["precision_choice"] = choice
    return result


def _by_precision(args: argparse.Namespace, device: str, engine: str, names: tuple[str, ...]) -> dict:
    """``--precisions``: each one's plain step (:func:`mtp_viz.measure.precisions.sweep`),
    one pair loaded at a time, in the main profile's target, weights and device."""
    from mtp_viz.engine.engines import default_engine
    from mtp_viz.measure.precisions import sweep
    from mtp_viz.sources.models import load_pair

    def load(name: str):
        print(f"mtp-viz profile: loading {args.target} in {name}", file=sys.stderr)
        return load_pair(args.target, device=device, dtype=name, weights=args.weights)
    put_on = None if engine == default_engine() else (lambda pair: _on_engine(pair, engine, args))
    return sweep(names, load, device, engine=engine, put_on=put_on, prompt_tokens=args.prompt_tokens,
                 draft_tokens=args.draft_tokens, repeats=args.repeats,
                 say=lambda line: print(f"mtp-viz profile: {line}", file=sys.stderr))


def _peer(args: argparse.Namespace, alphas: tuple[float, ...]) -> dict:
    """``--engine llama.cpp``: :func:`mtp_viz.measure.llamacpp_profile.study` of the exported
    pair, on a prompt of ``--prompt-tokens`` ids drawn (fixed seed) from the target's vocabulary
    (a forward's cost does not depend on which ids), with the machine line and the export's types."""
    import random

    from mtp_viz.analysis import published
    from mtp_viz.engine.config import text_config
    from mtp_viz.measure import llamacpp_profile, machine
    from mtp_viz.sources.shapes import shape
    server = llamacpp_profile.server_path(args.llama_server)
    vocab = text_config(shape(args.target).target).vocab_size
    rng = random.Random(7)
    ids = [rng.randrange(3, vocab) for _ in range(args.prompt_tokens)]
    folder = Path(args.gguf)
    kind = llamacpp_profile.file_type(folder / "target.gguf")
    result = llamacpp_profile.study(
        folder, ids, vocab, server=server, threads=args.threads, label=f"llama.cpp {kind}",
        new_tokens=args.max_new_tokens, draft_tokens=args.draft_tokens, max_draft_tokens=args.max_draft_tokens,
        alphas=alphas, repeats=args.repeats, random_weights=args.weights == "random", extra=args.llama_args.split(),
        size=published.model_size(args.target),
        log=lambda line: print(f"mtp-viz profile: {line}", file=sys.stderr))
    m = machine.machine()
    result["meta"] = {"target": args.target, "weights": args.weights, "gguf_type": kind, "prompt_tokens": len(ids),
                      "new_tokens": args.max_new_tokens, "draft_tokens": args.draft_tokens,
                      "max_draft_tokens": args.max_draft_tokens, "alphas": list(alphas), "repeats": args.repeats,
                      "clock": "the server's own (its timings)", "host": m, "machine_line": machine.line(m),
                      "server_build": llamacpp_profile.build_line(server), "llama_args": args.llama_args}
    return result


def run(args: argparse.Namespace) -> int:
    import torch

    from mtp_viz.sources.models import pick_device
    from mtp_viz.views.profile import markdown, peer_markdown

    from .flags import engine_of
    alphas, engine = check(args), engine_of(args)
    names = precision_list(args.precisions)
    torch.set_num_threads(args.threads)
    if engine in PEERS:
        result, view = _peer(args, alphas), peer_markdown
    else:
        device = pick_device(args.device)
        result, view = _profile(args, device, engine, alphas), markdown
        if names:   # after the main profile, whose pair is gone: one pair resident at a time
            result["precisions"] = _by_precision(args, device, engine, names)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    table = view(result)
    (out / "profile.json").write_text(json.dumps(result, indent=1, default=str), encoding="utf-8")
    (out / "profile.md").write_text(table + "\n", encoding="utf-8")
    print(table)
    print(f"wrote {out / 'profile.json'}, {out / 'profile.md'}", file=sys.stderr)
    return 0
