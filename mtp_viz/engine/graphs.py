"""The graphs a compiled run can meet, worked out from its numbers and compiled before it starts.

A run on the compiled engine (:mod:`.compiled`) meets three kinds of graph:

- ``verify``: the target's forward with the state an MTP drafter reads (its last hidden
  state and shared K/V), at a width of :data:`~.compiled.WIDTHS` and a cache capacity;
- ``step``: the same without that state (the autoregressive baseline, and drafters that
  read only tokens);
- ``draft``: the MTP drafter's step, at the capacity its full-attention K/V are padded to.

Which ones follow from a run's numbers alone (P prompt tokens, N new tokens, a schedule
whose longest draft is L, as :mod:`.loop` runs them):

- the target's capacity holds :func:`~.loop.speculative_need` (P + N + 17) for speculative
  decoding, :func:`~.loop.autoregressive_need` (P + N + 1) for the baseline; past the
  largest capacity the run decodes eagerly and needs no target graph;
- the prompt is planned no graph of its own: it goes through a compiled graph of its
  width where one exists (a prompt of up to 5 tokens meets a verification's), else
  eagerly, so a new prompt length never costs a compile (a prefill graph saved about
  10 ms on the bundled pair where compiling it took tens of seconds); every later
  forward is a graph, once a run makes N >= 2 tokens;
- a verification of k drafts sends k + 1 tokens: k from 0 (the last token of a run has
  no room for drafts) to min(L, N - 2) (a step leaves room for its own token);
  the baseline sends one; a run that drafts L tokens every step (a constant schedule
  with a drafter that drafts what it is asked, as MTP does) needs only the width of
  min(L, N - 2) drafts: its last, shorter verifications pad up to it;
- the MTP drafter drafts after a verification that left room (at most N - 2 tokens made):
  its full-attention K/V then hold S positions, P <= S <= P + N - 2, padded to the
  capacity holding S (eager past the largest).

:func:`compile_graphs` compiles a list of them one at a time, each through the engine's
own call (so its compile seconds land where a run's would: :meth:`~.decoder.Mounted.graphs`), and
reports each one before it starts (:class:`Progress`: "graph 3 of 7", with an estimate
of the time left from the seconds per graph measured so far).
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Callable, Iterable

import torch

from .compiled import CAPACITIES, Graph, capacity_for, width_for
from .loop import autoregressive_need, speculative_need

KINDS = ("verify", "step", "draft")


def speculative_graphs(prompt: int, new: int, longest: int, *, state: bool = True, draft: bool = True,
                       fixed: bool = False) -> set[Graph]:
    """The graphs a speculative run of ``new`` tokens after ``prompt`` can meet, its
    schedule drafting at most ``longest`` tokens at a time; ``state``: the drafter reads
    the target's state (verify graphs, else step graphs); ``draft``: its step is compiled;
    ``fixed``: every step drafts ``longest`` but the run's last few (a constant schedule
    and a drafter that drafts what it is asked), whose verifications pad up to the same
    width (:meth:`~.compiled.FastTarget.width`), so one width is all it needs."""
    out: set[Graph] = set()
    capacity = capacity_for(speculative_need(prompt, new))
    kind = "verify" if state else "step"
    if new < 2:
        return out
    if capacity is not None:
        most = min(longest, new - 2)
        out |= {Graph(kind, capacity, width_for(k + 1)) for k in range(most if fixed else 0, most + 1)}
    if draft and new >= 3:
        out |= {Graph("draft", c) for c in {capacity_for(s) for s in range(prompt, prompt + new - 1)}
                if c in CAPACITIES}
    return out


def autoregressive_graphs(prompt: int, new: int) -> set[Graph]:
    """The graphs a plain run of ``new`` tokens after ``prompt`` can meet."""
    capacity = capacity_for(autoregressive_need(prompt, new))
    if capacity is None:
        return set()
    return {Graph("step", capacity)} if new >= 2 else set()


@dataclass(frozen=True)
class Progress:
    """Where a compile stands, reported before each graph: ``graph`` is number ``index``
    of ``total``; ``left`` the estimated seconds to the end (None until one graph of its
    kind or another was timed)."""
    index: int
    total: int
    graph: Graph
    elapsed: float
    left: float | None

    def line(self) -> str:
        """"graph 3 of 7: the target over 5 tokens, with the drafter's state (256-position
        cache); about 1 min 40 s left"."""
        eta = f"about {duration(self.left)} left" if self.left is not None else "timing the first graph"
        return f"graph {self.index} of {self.total}: {self.graph.describe()}; {eta}"


def duration(seconds: float) -> str:
    """"40 s", "3 min 10 s": how long, to a reader."""
    seconds = max(0, round(seconds))
    return f"{seconds} s" if seconds < 90 else f"{seconds // 60} min {seconds % 60} s"


def estimate(left: Iterable[Graph], timed: dict[Graph, float]) -> float | None:
    """Seconds to compile ``left``: per graph, the mean of the graphs of its side (the
    target's or the drafter's) timed so far, else of every graph timed; None when none was."""
    if not timed:
        return None
    overall = sum(timed.values()) / len(timed)
    side = {}
    for drafter in (False, True):
        same = [t for g, t in timed.items() if (g.kind == "draft") == drafter]
        side[drafter] = sum(same) / len(same) if same else overall
    return sum(side[g.kind == "draft"] for g in left)


def compile_graphs(mounted, graphs: list[Graph], embed: torch.nn.Module,
                   progress: Callable[[Progress], None] | None = None) -> float:
    """Compile ``graphs`` in order on ``mounted`` (a :class:`~.decoder.Mounted` on the compiled engine), one at a
    time (those compiled already are skipped); ``progress`` hears of each before it starts. ``embed``: the
    target's input embeddings (a draft step's input starts with them). Stops at the first graph that falls
    back to eager (:meth:`~.decoder.Mounted.fallback`). Returns the seconds taken."""
    fast, step = mounted.decoder, mounted.draft_step
    todo = [g for g in graphs if g not in mounted.graphs()]
    t0 = time.perf_counter()
    for i, g in enumerate(todo):
        if any(mounted.fallback()):
            break
        if progress is not None:
            progress(Progress(i + 1, len(todo), g, time.perf_counter() - t0, estimate(todo[i:], mounted.graphs())))
        _build(fast, step, g, embed)
    return time.perf_counter() - t0


def _build(fast, step, g: Graph, embed: torch.nn.Module) -> None:
    """One graph, compiled by the call a run makes: a cache at its capacity (made, as a
    run's, outside inference mode: it is cropped outside it), then a forward of
    ``g.width`` tokens at that width (:meth:`~.compiled.FastTarget.build`); a draft step on
    zero K/V of its shapes, taken from an eager
    forward of one token."""
    kv = fast.new_cache(g.capacity if g.kind != "draft" else 1)
    try:
        if g.kind != "draft":
            fast.build(kv, g.width, g.kind == "verify")
            return
        first = fast.eager(kv, [fast.pad], True, keep=1)
    finally:
        fast.release(kv)
    with torch.inference_mode():  # as the drafter's propose() runs it
        _draft(fast, step, g, embed, first)


def _draft(fast, step, g: Graph, embed: torch.nn.Module, first) -> None:
    dtype = step.twin.dtype
    kv_in = {kind: tuple(torch.zeros(*t.shape[:2], g.capacity if kind == "full_attention" else t.shape[2],
                                     t.shape[3], dtype=dtype, device=t.device) for t in pair)
             for kind, pair in first.shared_kv.items()}
    token = torch.tensor([[fast.pad]], device=fast.device)
    x = torch.cat([embed(token).to(dtype), first.hidden.to(dtype)], dim=-1)
    step(x, torch.zeros(1, 1, dtype=torch.long, device=fast.device), step.inputs(kv_in, dtype))


__all__ = ["Graph", "KINDS", "Progress", "autoregressive_graphs", "compile_graphs", "duration", "estimate",
           "speculative_graphs"]
