"""Where things are, for tests in any folder of tests/."""
from pathlib import Path

TESTS = Path(__file__).resolve().parent   # tests/: the shared helpers (factories, serving, streams ...)
ROOT = TESTS.parent                       # the checkout
DATA = TESTS / "data"                     # recorded server answers, the chat template
