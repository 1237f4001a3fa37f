"""The ``mtp-viz`` command (and ``python -m mtp_viz``): the CLI's subcommands and ``ui``.

It sits above every front end, as the public API does: the CLI (:mod:`mtp_viz.cli.main`)
parses and runs ``generate``, ``replay`` and ``bench``, and ``ui`` is the app's
(:mod:`mtp_viz.app.page.layout`), named here so that neither front end names the other.
No module of the package imports this one.
"""
from __future__ import annotations

import sys

# the app's subcommand, as the CLI's SUBCOMMANDS give theirs: (module with add_arguments and run, help)
UI = ("mtp_viz.app.page.layout", "Start the Gradio app.")


def main(argv: list[str] | None = None) -> int:
    from mtp_viz.cli.main import SUBCOMMANDS, main as run
    return run(argv, {**SUBCOMMANDS, "ui": UI})


if __name__ == "__main__":
    sys.exit(main())
