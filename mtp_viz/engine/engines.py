"""Engines: what runs a loaded pair's forwards. A registry, as drafters and schedules are.

The loop runs a :class:`mtp_viz.engine.decoder.Decoder` and never asks which one; this
table says which decoders there are. Each entry names a ``mount(target, assistant, mode)``
function of this package that puts a loaded target (and its MTP assistant, or None) on
the engine and returns a :class:`mtp_viz.engine.decoder.Mounted`: the decoder, the MTP
drafter's step, what compiling took, and the sentence saying why it fell back to eager
decoding, if it did.
The CLI's ``--engine``, the page's engine control and Measure's engine beside the pair, its links
and the bench read the table;
a new engine is a module with a ``mount`` function and one line here.

Readable without importing torch: the CLI builds its parser from it.
"""
from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any

from mtp_viz.errors import UserError, clip


@dataclass(frozen=True)
class Engine:
    """An engine in the registry."""
    label: str       # how the page and the CLI name it (as its decoder's Ran.label does)
    path: str        # "module:function": its mount(target, assistant, mode) -> Mounted (imports torch)
    compiles: bool   # graphs compiled once per pair before a run's first token (minutes, one
    #                  compile at a time: a pair of its own, offered where MTP_VIZ_COMPILE allows);
    #                  its decoder and step then have engine.graphs' shapes
    help: str        # one line for the CLI's help


# name -> entry: the one table the CLI, the page, links and the bench read. The first is
# the default: what a pair loads on unless asked otherwise, and what the bench holds others against.
ENGINES: dict[str, Engine] = {
    "eager": Engine("eager engine", "mtp_viz.engine.decoder:mount", False,
                    "transformers' forward and DynamicCache, as loaded"),
    "compiled": Engine("compiled engine", "mtp_viz.engine.compiled:mount", True,
                       "a static KV cache and torch.compile'd target and drafter steps, compiled before "
                       "the first token and timed apart; where it cannot compile, one sentence and eager"),
}


def default_engine() -> str:
    """The engine a pair loads on unless asked otherwise (the table's first)."""
    return next(iter(ENGINES))


def check_engine(name: Any) -> str:
    """``name`` if it is an engine of the table, else one sentence naming them."""
    if name not in ENGINES:
        raise UserError(f"Unknown engine {clip(name)!r}; choose one of: {', '.join(ENGINES)}.")
    return name


# What the switch this table replaced names: kept as an alias of this engine where a user writes it
# (the CLI's ``--compile``, a ``compile=1`` link, ``load_pair(compile=True)``), read once where each is
# read (cli.flags.add_engine_argument, app.handlers.links, sources.models.load_pair); past them, an engine's name.
COMPILE_ALIAS = "compiled"


def resolve(engine: Any = None, compile: Any = False) -> str:
    """The engine a user's input names: ``engine`` (checked), else the compiled one where the
    ``compile`` alias is on, else the default. Both, naming two engines: one sentence."""
    if engine is not None and compile and engine != COMPILE_ALIAS:
        raise UserError(f"The compile switch names the {COMPILE_ALIAS} engine, not {clip(engine)!r}: give one of them.")
    return check_engine(engine) if engine is not None else COMPILE_ALIAS if compile else default_engine()


def mount(name: str, target: Any, assistant: Any = None, mode: str | None = None) -> Any:
    """``target`` (and its MTP ``assistant``, or None) on the engine ``name``; ``mode``:
    torch.compile's, for an engine that compiles. A :class:`mtp_viz.engine.decoder.Mounted`;
    compiles nothing yet (:mod:`mtp_viz.sources.compiling` does)."""
    module, fn = ENGINES[check_engine(name)].path.split(":")
    return getattr(importlib.import_module(module), fn)(target, assistant, mode)


__all__ = ["COMPILE_ALIAS", "ENGINES", "Engine", "check_engine", "default_engine", "mount", "resolve"]
