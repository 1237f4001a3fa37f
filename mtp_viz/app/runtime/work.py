"""The model work in progress in this process, so that it ends before the process does.

Every thread that runs a model for the app (a run's worker, a load and its warm-up,
Measure) does so inside :func:`working`, with its stop switch (None for a load, which
cannot be stopped). :func:`stop_all` asks each to stop and waits for it: the app calls it
when it closes (``demo.close()``) and at exit. Without it a script that closes the app
while a model runs exits with "terminate called without an active exception" (code 134):
the interpreter ends a daemon thread still inside torch by ``pthread_exit``, whose
unwinding through torch's C++ frames aborts the process.
"""
from __future__ import annotations

import atexit
import threading
from contextlib import contextmanager
from typing import Iterator

STOP_SECONDS = 120.0   # how long stop_all waits: a run stops after its step, a load cannot stop

_cond = threading.Condition()
_live: list[tuple[threading.Thread, threading.Event | None]] = []   # (thread, stop switch), in progress
_at_exit = False


@contextmanager
def working(stop: threading.Event | None = None) -> Iterator[None]:
    """Model work on this thread: :func:`stop_all` sets ``stop`` and waits for the block to end."""
    entry = (threading.current_thread(), stop)
    with _cond:
        _live.append(entry)
    try:
        yield
    finally:
        with _cond:
            _live.remove(entry)
            _cond.notify_all()


def stop_all(timeout: float = STOP_SECONDS) -> bool:
    """Ask all model work to stop and wait until its blocks ended, ``timeout`` seconds at
    most (work on the calling thread itself is not waited for); True when none is left."""
    me = threading.current_thread()
    with _cond:
        for _, stop in _live:
            if stop is not None:
                stop.set()
        return _cond.wait_for(lambda: all(t is me for t, _ in _live), timeout)


def stop_at_exit() -> None:
    """Make the interpreter's exit call :func:`stop_all` (once; the app does this when it serves)."""
    global _at_exit
    with _cond:
        if not _at_exit:
            atexit.register(stop_all)
            _at_exit = True


__all__ = ["stop_all", "stop_at_exit", "working"]
