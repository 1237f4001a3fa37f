"""The flags several commands share, one meaning each: the precisions (``--dtype``,
``--target-precision``, ``--drafter-precision``), ``--weights``, ``--engine`` with its alias
``--compile`` (read once, here, into an engine's name), and the line each graph's compile
prints. generate, bench, gguf and profile add them from here."""
from __future__ import annotations

import argparse
import sys

from mtp_viz.errors import UserError


def add_precision_arguments(p: argparse.ArgumentParser) -> None:
    """``--dtype`` (both models) and ``--target-precision`` / ``--drafter-precision`` (one)."""
    p.add_argument("--dtype", default=None, metavar="PRECISION",
                   help="both models' precision: float32, bfloat16, float16, int8 or int4 (default: bfloat16 "
                        "on a GPU, float32 on a CPU, which takes twice bfloat16's memory)")
    p.add_argument("--target-precision", default=None, metavar="PRECISION",
                   help="the target's precision (float32, bfloat16, float16, int8, int4); wins over --dtype")
    p.add_argument("--drafter-precision", default=None, metavar="PRECISION",
                   help="the drafter's precision; wins over --dtype")


def add_weights_argument(p: argparse.ArgumentParser) -> None:
    """``--weights real|random`` (generate, bench, gguf, profile: one flag, one meaning)."""
    p.add_argument("--weights", default="real", choices=("real", "random"),
                   help="random: the target's real shape (a preset's, e.g. e2b) with random weights, nothing "
                        "downloaded but a config; timings only: its text and acceptance are noise (default: real)")


class EngineFlag(argparse.Action):
    """``--engine NAME`` and its alias ``--compile`` (``--engine compiled``), read here, once, into
    ``args.engine`` (a name of :data:`mtp_viz.engine.engines.ENGINES`; None: not given) and
    ``args.engine_flag`` (the flag that named it, ``--compile`` once given, for a sentence): past
    the parser no command knows the alias. The two naming two engines, in either order: one sentence."""

    def __call__(self, parser, namespace, values, option_string=None):
        from mtp_viz.engine.engines import ENGINES, resolve
        alias = option_string == "--compile"
        if not alias and values not in ENGINES:   # a peer engine the command takes (profile: llama.cpp)
            namespace.engine, namespace.engine_flag = values, option_string
            return
        try:   # the alias given before or after --engine NAME: resolve checks the two agree
            namespace.engine = resolve(namespace.engine if alias else values,
                                       alias or namespace.engine_flag == "--compile")
        except UserError as e:
            parser.error(str(e))
        namespace.engine_flag = "--compile" if alias else namespace.engine_flag or option_string


def add_engine_argument(p: argparse.ArgumentParser, what: str, peers: dict[str, str] | None = None) -> None:
    """``--engine`` (a name of :data:`mtp_viz.engine.engines.ENGINES`, read when the
    parser is built, or of ``peers``: another engine the command measures, name -> help)
    and ``--compile``, kept as its alias for the compiled engine (generate, bench, profile:
    one flag, one meaning; ``what``: what the engine does here), both read by :class:`EngineFlag`."""
    from mtp_viz.engine.engines import COMPILE_ALIAS, ENGINES, default_engine
    listed = "; ".join([*(f"{name}: {e.help}" for name, e in ENGINES.items()),
                        *(f"{name}: {h}" for name, h in (peers or {}).items())])
    p.add_argument("--engine", choices=[*ENGINES, *(peers or {})], default=None, action=EngineFlag,
                   help=f"{what} (default: {default_engine()}). {listed}")
    p.add_argument("--compile", dest="engine", nargs=0, action=EngineFlag, help=f"an alias of --engine {COMPILE_ALIAS}")
    p.set_defaults(engine_flag=None)


def engine_of(args: argparse.Namespace) -> str:
    """The engine ``--engine`` (or its alias) names (default: the table's first)."""
    from mtp_viz.engine.engines import default_engine
    return args.engine or default_engine()


def compile_progress(prefix: str):
    """What ``--engine compiled`` prints on stderr before each graph: "mtp-viz: compiling graph 3
    of 7: the target over 5 tokens, ... (256-position cache); about 40 s left"."""
    return lambda p: print(f"{prefix}: compiling {p.line()}", file=sys.stderr, flush=True)


__all__ = ["EngineFlag", "add_engine_argument", "add_precision_arguments", "add_weights_argument", "compile_progress",
           "engine_of"]
