"""A pair made ready for the app: loaded, put on its engine with the first run's graphs
compiled, and warmed through the app's whole path (so its first run is timed warm); and the
status lines a run shows while the graphs it needs compile before its first token.
"""
from __future__ import annotations

import dataclasses
import threading
import time
from typing import Any, Callable, Iterator

from mtp_viz.sources.base import WARM_UP_TOKENS, Source
from mtp_viz.sources.settings import RunSettings
from mtp_viz.views import tokens

from . import deploy, pairs, service, work
from .runs import Session, compare_frames
from .service import user_message

# seconds between status lines while a run's graphs compile (each frame is Gradio work beside the compile)
COMPILE_POLL = 1.0
COMPILE_TICK = 0.1   # seconds between looks for a graph that started (a line only when one did, or POLL passed)
WARM_FRAMES = 0.05   # seconds between the warm-up's frames (see warm_up)
# A first run as the page starts (#max-new 64, #draft-tokens 4, the constant schedule,
# both modes) on a short prompt: what a pair asked compiled compiles when it loads, and
# (shorter) the warm-up, so a first run with the page's settings finds every graph there.
FIRST_RUN = RunSettings("def main():\n    return", max_new_tokens=64, draft_tokens=4, chat=False)


def compile_lines(pair: Any, s: RunSettings, stop: threading.Event) -> Iterator[str]:
    """Compile, before a run's first token, every graph the runs of ``s`` can meet that
    ``pair`` (on the compiled engine) has not compiled yet
    (:func:`mtp_viz.sources.compiling.prepare`), on a thread of its own; yields a status
    line as each graph starts (every graph is named once, however fast it compiles: a warm
    compiler cache takes a fraction of a second) and every :data:`COMPILE_POLL` seconds
    meanwhile (nothing for an eager pair, or when every graph is there). Stop ends the wait
    in one sentence; the graphs go on compiling for the next run. A failure is one
    sentence (UserError)."""
    from mtp_viz.errors import UserError
    from mtp_viz.sources import compiling
    if not compiling.needed(pair, s):   # an eager pair needs none
        return
    heard: list[Any] = []   # each graph's progress, as the compile reaches it (list.append is atomic)
    failed: list[BaseException] = []
    done = threading.Event()

    def compile_all() -> None:
        try:
            with work.working():  # a compile cannot stop: the app's close waits for it (mtp_viz.app.runtime.work)
                compiling.prepare(pair, [s], progress=heard.append)
        except BaseException as e:  # noqa: BLE001 - told below, as one sentence
            failed.append(e)
        finally:
            done.set()

    def line(p: Any) -> str:
        return tokens.message_html("Compiling this run's graphs before its first token, "
                                   + (p.line() if p is not None else "waiting for the compiler (one compile at a time)")
                                   + f"… {time.monotonic() - t:.0f} s")
    threading.Thread(target=compile_all, daemon=True, name="mtp-viz-compile").start()
    t = last = time.monotonic()
    said = 0
    while not done.wait(COMPILE_TICK):
        if stop.is_set():
            raise UserError("Stopped while compiling; the graphs go on compiling for the next run.")
        if said < len(heard) or time.monotonic() - last >= COMPILE_POLL:
            news, said, last = heard[said:] or heard[-1:] or [None], len(heard), time.monotonic()
            for p in news:
                yield line(p)
    for p in heard[said:]:   # graphs that started and ended between two looks
        yield line(p)
    if failed:
        raise UserError(user_message(failed[0])) from failed[0]


def warm_up(source: Source, new_tokens: int = WARM_UP_TOKENS, top: int = 0) -> None:
    """An untimed comparison through the app's whole path: both modes in turns, top-k
    recording, panes, stats and every chart. The first call of each pays for lazy
    initialisation (torch's kernels, plotly's validators), which would otherwise land
    inside the first run a user times, on the same CPU."""
    s = dataclasses.replace(FIRST_RUN, max_new_tokens=new_tokens, top=top)
    # a frame every WARM_FRAMES s, not 0: at 0 the consumer never waits for the worker's
    # queue and spins, holding the interpreter's lock the engine's thread needs at every
    # torch op (a warm-up of 8 tokens took up to a minute on 2 cores)
    for _ in compare_frames(source, s, Session(), frame_interval=WARM_FRAMES, chart_interval=0):
        pass


def load_and_warm(target: str, drafter: str | None, precision: Any = None, engine: str | None = None,
                  progress: Callable[[Any], None] | None = None) -> Any:
    """The app's :class:`.service.PairLoader` work: set torch's threads on purpose, load
    the pair (each model in the precision the page asked, else ``MTP_VIZ_DTYPE`` if set,
    else the device's default; ``engine``: put on that engine of
    :data:`mtp_viz.engine.engines.ENGINES`, one that compiles with the graphs of
    :data:`FIRST_RUN` compiled now, ``progress`` told of each, ``pair.compile_seconds``, or
    eager with ``pair.compile_note`` saying why; None: the default), and warm it through
    the app's path (:func:`warm_up`)."""
    from mtp_viz.engine.engines import default_engine
    from mtp_viz.sources import models  # imports torch: only here, on first use
    models.set_threads(service.threads())
    pair = models.load_pair(target, drafter, dtype=deploy.env_dtype(),
                            target_precision=precision.target if precision else None,
                            drafter_precision=precision.drafter if precision else None)
    if engine not in (None, default_engine()):   # a pair loads on the default engine
        pair.use(engine, settings=[FIRST_RUN], progress=progress)
    return warm(pair)


def warm(pair: Any) -> Any:
    """``pair``, warmed through the app's path (:func:`warm_up`) so its first run is timed warm."""
    from mtp_viz.sources.local import LocalSource
    from mtp_viz.views import inspector
    warm_up(LocalSource(pair), top=inspector.TOP)
    return pair


def preloaded(pair: Any) -> Callable[..., Any]:
    """The app's loading work when it is given a pair already in memory (a notebook's,
    :func:`mtp_viz.launch`): that pair for its own name in the default precision on its
    own engine, warmed but not loaded again (:func:`mtp_viz.launch` set torch's threads as
    the app sets them); any other pair, these models in another precision, or asked on
    another engine, loads as usual."""
    key = pairs.pair_key(pair.name, pair.drafter_name)
    return lambda target, drafter, precision=None, engine=None, progress=None: warm(pair) \
        if pairs.pair_key(target, drafter) == key and precision is None and engine is None \
        else load_and_warm(target, drafter, precision, engine, progress)


__all__ = ["FIRST_RUN", "compile_lines", "load_and_warm", "preloaded", "warm", "warm_up"]
