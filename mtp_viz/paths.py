"""Where the package's data lives. Every layer may use it; it imports nothing of ours."""
from __future__ import annotations

from pathlib import Path


def assets_dir() -> Path:
    """The package's data folder: the bundled pair, prompt suites, example traces, CSS."""
    return Path(__file__).resolve().parent / "assets"
