"""A loaded pair put on an engine (:mod:`mtp_viz.engine.engines`), and, on one that
compiles (:mod:`mtp_viz.engine.compiled`), every graph a run can meet compiled before its
first token.

:func:`use_engine` mounts the pair on an engine (``pair.mounted``: its decoder and MTP
draft step) and, where the engine compiles, compiles the graphs of the runs it is told of
(by default a :data:`DEFAULT_RUN`), timed into ``pair.mounted.seconds``; where it cannot
compile, ``pair.mounted.note`` holds the one sentence saying why it decodes eagerly.
:func:`prepare` compiles what a run's settings need and the pair has not compiled yet
(:mod:`mtp_viz.engine.graphs` works it out), one graph at a time, telling ``progress`` of
each: every run on a compiled pair goes through it before it starts
(:func:`mtp_viz.sources.local.run_mode`), so no graph is compiled mid-run. What the pair has
compiled, and why a part fell back, it reads from its engine (:class:`mtp_viz.engine.decoder.Mounted`).
:meth:`ModelPair.use`, :meth:`ModelPair.on` and ``load_pair(engine=...)`` come here;
the pair only holds what it produced.
"""
from __future__ import annotations

import dataclasses
import time
from typing import Any, Callable, Iterable

from .settings import MAX_DRAFT_TOKENS, RunSettings

# What a pair compiles for when no run is named: a short prompt, both modes, 64 new
# tokens (the app's and the CLI's default), the drafter's own draft length.
DEFAULT_RUN = RunSettings("def main():\n    return", max_new_tokens=64, chat=False)


def use_engine(pair: Any, engine: str, mode: str | None = None, settings: Iterable[RunSettings] = (),
               progress: Callable[[Any], None] | None = None) -> str:
    """Put ``pair`` on ``engine`` (a name of :data:`mtp_viz.engine.engines.ENGINES`); one
    that compiles compiles every graph the runs of ``settings`` (default:
    :data:`DEFAULT_RUN`) can meet, ``progress`` hearing of each before it compiles
    (:class:`mtp_viz.engine.graphs.Progress`). ``mode``: torch.compile's
    (``"reduce-overhead"``: CUDA graphs, on a GPU). Returns "" or the sentence saying why
    it decodes eagerly."""
    from mtp_viz.engine import engines
    from mtp_viz.engine.build import building
    with building():  # never beside a load: tracing reads the default dtype a load sets
        t = time.perf_counter()
        pair.mounted = engines.mount(engine, pair.target, pair.drafter_model if pair.has_mtp else None, mode)
        if engines.ENGINES[engine].compiles and not pair.mounted.note:
            _compile(pair, list(settings) or [DEFAULT_RUN], progress)
            pair.mounted.seconds = time.perf_counter() - t
    return pair.mounted.note


def engine_copy(pair: Any, engine: str, mode: str | None = None, settings: Iterable[RunSettings] = (),
                progress: Callable[[Any], None] | None = None) -> Any:
    """The same models as a pair of their own on ``engine`` (``pair`` stays as it is;
    nothing is copied), compiled now for ``settings`` where it compiles: what the bench
    compares against it."""
    from mtp_viz.engine.schedules import ScheduleCache
    other = dataclasses.replace(pair, schedules=ScheduleCache(), mounted=None)
    use_engine(other, engine, mode, settings, progress)
    return other


def needed(pair: Any, s: RunSettings, schedule: Any = None) -> list:
    """The graphs the runs of ``s`` on ``pair`` can meet and it has not compiled yet
    (:mod:`mtp_viz.engine.graphs`), in the order they compile: a target graph, the
    drafter's steps, the other target graphs (by kind, capacity, width); [] for a pair on
    the eager engine. ``schedule``: the speculative run's own (else the
    one its settings name)."""
    if not compiles(pair):
        return []
    from mtp_viz.engine import graphs
    from mtp_viz.engine.schedules import make_schedule
    prompt, new, out = len(pair.encode(s.prompt, s.chat)), s.max_new_tokens, set()
    if "autoregressive" in s.modes:
        out |= graphs.autoregressive_graphs(prompt, new)
    if "speculative" in s.modes:
        d = pair.make_drafter(s.drafter)
        if schedule is None:
            schedule = make_schedule(s.schedule, initial=s.draft_tokens or d.default_draft_tokens,
                                     cap=MAX_DRAFT_TOKENS)
        drafts = pair.draft_step is not None and getattr(d, "step", None) is pair.draft_step  # MTP, compiled
        # an MTP drafter drafts every token asked: under a constant schedule each step is as wide
        out |= graphs.speculative_graphs(prompt, new, schedule.longest, state=d.needs_target_state, draft=drafts,
                                         fixed=schedule.fixed and d.needs_target_state)
    todo = sorted(out - set(pair.mounted.graphs()), key=lambda g: (g.kind == "draft", g))
    # the drafter's step (much smaller) second: once one graph of each side is timed, the estimate holds
    drafts = [g for g in todo if g.kind == "draft"]
    return todo[:1] + drafts + todo[1:len(todo) - len(drafts)] if drafts and len(todo) > len(drafts) else todo


def prepare(pair: Any, settings: Iterable[RunSettings], progress: Callable[[Any], None] | None = None,
            schedule: Any = None) -> float:
    """Compile, one at a time, every graph the runs of ``settings`` can meet on
    ``pair`` that it has not compiled yet (none on the eager engine); ``progress`` hears
    of each before it compiles. Returns the seconds it took (0.0 when nothing was missing)."""
    if not compiles(pair):
        return 0.0
    from mtp_viz.engine.build import building
    todo = _todo(pair, settings, schedule)
    if not todo:
        return 0.0
    with building():
        t = time.perf_counter()
        _compile(pair, list(settings), progress, schedule)
        seconds = time.perf_counter() - t
    pair.mounted.seconds += seconds
    return seconds


def _todo(pair: Any, settings: Iterable[RunSettings], schedule: Any = None) -> list:
    out: list = []
    for s in settings:
        out += [g for g in needed(pair, s, schedule) if g not in out]
    return out


def _compile(pair: Any, settings: list[RunSettings], progress, schedule: Any = None) -> None:
    """Compile what ``settings`` need; then keep the pair on its engine, or drop to eager
    with the sentence saying why (``pair.mounted.note``)."""
    from mtp_viz.engine import graphs
    graphs.compile_graphs(pair.mounted, _todo(pair, settings, schedule), pair.target.get_input_embeddings(), progress)
    pair.mounted = pair.mounted.settled()


def compiles(pair: Any) -> bool:
    """Whether ``pair`` runs compiled graphs (:attr:`mtp_viz.engine.decoder.Mounted.compiles`): False on the eager
    engine, for a pair on no engine yet, and for a stand-in pair without one."""
    mounted = getattr(pair, "mounted", None)
    return mounted is not None and mounted.compiles


__all__ = ["DEFAULT_RUN", "compiles", "engine_copy", "needed", "prepare", "use_engine"]
