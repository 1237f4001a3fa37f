"""`mtp-viz gguf --target T --out DIR`: write a Gemma 4 pair as GGUF files for llama.cpp.

``DIR/target.gguf`` and ``DIR/drafter.gguf`` (both, or neither: a pair already there is
replaced only with ``--force``), for ``llama-server -m DIR/target.gguf -md
DIR/drafter.gguf --spec-type draft-mtp`` (:mod:`mtp_viz.sources.llamacpp.gguf` says what is
written and why). Needs the ``gguf`` package (``pip install "mtp-viz[gguf]"``).
"""
from __future__ import annotations

import argparse
import importlib.util
import sys

from mtp_viz.errors import UserError

OUTTYPES = ("f32", "f16", "bf16", "q8_0")   # the writer's; listed here so --help loads nothing


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--target", required=True, help="a preset (tiny, e2b, ...), a hub id or a folder")
    p.add_argument("--drafter", default=None,
                   help="its MTP assistant (default: the preset's, or the target's -assistant)")
    p.add_argument("--out", required=True, help="the folder to write target.gguf and drafter.gguf into")
    p.add_argument("--outtype", choices=OUTTYPES, default="f32",
                   help="how weights are stored (default f32; norms and scales stay f32)")
    p.add_argument("--force", action="store_true",
                   help="replace a target.gguf or drafter.gguf the folder already holds (without it: refused)")
    from .flags import add_weights_argument
    add_weights_argument(p)


def run(args: argparse.Namespace) -> int:
    if importlib.util.find_spec("gguf") is None:
        raise UserError('mtp-viz gguf needs the gguf package: pip install "mtp-viz[gguf]".')
    from mtp_viz.sources.llamacpp.gguf import export_pair, export_random
    if args.weights == "random":
        if args.drafter:
            raise UserError("With random weights the drafter is the target's own assistant, at its real shape; "
                            "leave out --drafter.")
        result = export_random(args.target, args.out, args.outtype, args.force)
    else:
        result = export_pair(args.target, args.drafter, args.out, args.outtype, args.force)
    for note in result.notes:
        print(f"mtp-viz: note: {note}", file=sys.stderr)
    print(result.target)
    print(result.drafter)
    return 0
