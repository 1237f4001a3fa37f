"""One model build at a time, process-wide.

Building a model changes state that every thread of the process shares: transformers'
``from_pretrained`` sets torch's default dtype to the precision asked and swaps out the
``torch.nn.init`` functions while it builds, then puts back what it found. Two builds
that overlap put back each other's state (a float32 pair loaded beside a bfloat16 one
came out partly in bfloat16), and ``torch.compile`` traces under whatever default dtype
is in force (a compile beside a load traced bfloat16 constants into a float32 graph).

So loading a model, compiling one, and calling a compiled graph (whose guards read the
default dtype, and which recompiles on a change) each happen inside :func:`building`.
Eager forwards do not: they pass every dtype explicitly, so an eager run goes on beside a
load (``tests/sources/test_load_integrity.py`` checks both).
"""
from __future__ import annotations

import threading
import time
from contextlib import contextmanager
from typing import Iterator

_LOCK = threading.RLock()   # re-entrant: a compile calls its own graphs


def building() -> threading.RLock:
    """The process's build lock, as a context manager (``with building(): ...``)."""
    return _LOCK


@contextmanager
def turn() -> Iterator[float]:
    """:func:`building`, giving the seconds spent waiting for it (exactly 0.0 when no other
    build held it): a compiled run keeps that wait off its clock, as it does compiling."""
    waited = 0.0
    if not _LOCK.acquire(blocking=False):
        t = time.perf_counter()
        _LOCK.acquire()
        waited = time.perf_counter() - t
    try:
        yield waited
    finally:
        _LOCK.release()


__all__ = ["building", "turn"]
