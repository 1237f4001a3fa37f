"""`mtp-viz` entry point: generate | replay | bench | gguf | profile | ui.

Each subcommand lives in its own module, which provides ``add_arguments(parser)``
and ``run(args) -> int``. Errors a user can cause print one sentence on stderr and
exit with code 2.

This module holds the CLI's own subcommands; the ``mtp-viz`` command itself is
:mod:`mtp_viz.__main__`, above every front end, which adds ``ui`` (the app's) to these:
a front end never names another.
"""
from __future__ import annotations

import argparse
import importlib
import sys

from mtp_viz.errors import UserError
from mtp_viz.sources.noise import quiet_known_noise

SUBCOMMANDS = {
    "generate": ("mtp_viz.cli.generate", "Generate text and show how each token was decided."),
    "replay": ("mtp_viz.cli.replay", "Play a recorded trace in the terminal at its recorded timing."),
    "bench": ("mtp_viz.cli.bench", "Benchmark speculative decoding against autoregressive and transformers."),
    "gguf": ("mtp_viz.cli.gguf", "Write a Gemma 4 pair as GGUF files for llama.cpp."),
    "profile": ("mtp_viz.cli.profile", "What each forward costs here, and the speedup that predicts."),
}

__all__ = ["main", "build_parser", "UserError"]


class Parser(argparse.ArgumentParser):
    """argparse, but a mistake is one sentence on stderr and exit status 2 (no usage block)."""

    def error(self, message: str):
        self.exit(2, f"{self.prog}: error: {message.rstrip('.')}; see {self.prog} --help.\n")


def build_parser(command: str | None = None, commands: dict[str, tuple[str, str]] | None = None
                 ) -> argparse.ArgumentParser:
    """Only the chosen subcommand's module is imported (the UI's pulls in gradio).
    ``commands``: name -> (module, help), default :data:`SUBCOMMANDS`."""
    parser = Parser(prog="mtp-viz", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True, parser_class=Parser)
    for name, (module, help_text) in (commands or SUBCOMMANDS).items():
        p = sub.add_parser(name, help=help_text, description=help_text)
        p.set_defaults(_module=module)
        if name == command:
            importlib.import_module(module).add_arguments(p)
    return parser


def main(argv: list[str] | None = None, commands: dict[str, tuple[str, str]] | None = None) -> int:
    """Runs one subcommand of ``commands`` (default :data:`SUBCOMMANDS`; the ``mtp-viz``
    command passes its own, with ``ui``) and returns its exit status."""
    argv = sys.argv[1:] if argv is None else list(argv)
    commands = commands or SUBCOMMANDS
    command = next((a for a in argv if a in commands), None)
    try:
        args = build_parser(command, commands).parse_args(argv)
    except SystemExit as e:  # --help, or a one-sentence usage error (see Parser.error)
        return int(e.code or 0)
    quiet_known_noise()  # stderr keeps to this command's own lines
    module = importlib.import_module(args._module)
    try:
        return int(module.run(args) or 0)
    except UserError as e:
        print(f"mtp-viz: error: {str(e).strip()}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("mtp-viz: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
