"""The tree checks itself: ruff, with the rule set pyproject.toml's ``[tool.ruff.lint]``
chooses, finds nothing anywhere in the repository (the package, tests, benchmarks,
training, scripts and the notebook). Part of the quick tier, so the README's test command
lints too; ruff is in the test extra, so under CI a missing ruff fails instead of skipping."""
from __future__ import annotations

import importlib.util
import os
import subprocess
import sys

import pytest

from locations import ROOT


def test_ruff_finds_nothing():
    if importlib.util.find_spec("ruff") is None:
        message = 'needs ruff (pip install -e ".[test]" installs it)'
        if os.environ.get("CI"):  # CI installs the test extra: a missing linter is a failure there
            pytest.fail(message)
        pytest.skip(message)
    result = subprocess.run([sys.executable, "-m", "ruff", "check", "--no-cache", "--output-format", "concise", "."],
                            cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, f"ruff check . found:\n{result.stdout}{result.stderr}"
