"""Shared test setup. The models in these tests are tiny: one thread runs them fastest
and keeps the suite steady on a shared 2-core machine.

The tests mirror the package (engine/, sources/, analysis/, cli/, app/); their shared
helpers sit here in tests/ (factories, serving, streams, invariants, hostile, fake_llamacpp,
forms, real_vllm, browsing, locations), importable from every folder."""
import os
import sys
from pathlib import Path

import pytest
import torch

TESTS = str(Path(__file__).resolve().parent)
if TESTS not in sys.path:
    sys.path.insert(0, TESTS)

torch.set_num_threads(1)


@pytest.fixture(scope="module")
def browser():
    """Headless Chromium (Debian's package), for every test folder that opens a page."""
    from browsing import ARGS, CHROMIUM
    if not Path(CHROMIUM).exists():
        message = "needs Debian's chromium (apt-get install chromium fonts-dejavu-core)"
        if os.environ.get("CI"):  # CI installs it: a missing browser is a failure there
            pytest.fail(message)
        pytest.skip(message)
    from playwright import sync_api
    with sync_api.sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        yield b
        b.close()




@pytest.fixture(scope="module")
def random_pair():
    """A random Gemma 4 pair with a word-level tokenizer (:func:`factories.random_pair`), one per module."""
    import factories
    return factories.random_pair()
