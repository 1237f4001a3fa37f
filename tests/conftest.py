"""Shared test setup. The models in these tests are tiny: one thread runs them fastest
and keeps the suite steady on a shared 2-core machine.

The tests mirror the package (engine/, sources/, analysis/, cli/, app/); their shared
helpers sit here in tests/ (factories, serving, streams, invariants, hostile, real_vllm,
browsing, locations), importable from every folder."""
import sys
from pathlib import Path

import torch

TESTS = str(Path(__file__).resolve().parent)
if TESTS not in sys.path:
    sys.path.insert(0, TESTS)

torch.set_num_threads(1)
