"""The local engine as a source: a model pair in this process.

Its modes take turns on the calling thread, each on its own clock (:mod:`.interleave`):
the engine thread's CPU time with one torch thread on a CPU, wall time elsewhere
(:func:`.interleave.own_clock`). Running out of memory becomes one sentence.
"""
from __future__ import annotations

import dataclasses
import threading
from typing import Any, Callable, Iterator

from mtp_viz.engine.drafters import DRAFTERS
from mtp_viz.engine.events import Event, Start
from mtp_viz.engine.schedules import ScheduleCache
from mtp_viz.engine.text import Detokenizer
from mtp_viz.errors import UserError

from .base import Capabilities, Pause, Source
from .compiling import prepare
from .interleave import interleave, own_clock
from .settings import MAX_DRAFT_TOKENS, RunSettings

# the one sentence for counting experts on a dense target (the CLI, the API, the app)
DENSE = ("This target is dense: every token uses the same weights, so there are no experts to count; "
         "counting experts needs a mixture-of-experts target such as the 26B-A4B.")


def out_of_memory(err: BaseException) -> bool:
    """Whether ``err`` means memory ran out. Accelerators raise torch's typed error;
    the CPU allocator raises a plain RuntimeError, whose message is its only sign."""
    import torch
    return isinstance(err, (torch.OutOfMemoryError, MemoryError)) or (
        isinstance(err, RuntimeError) and "can't allocate memory" in str(err))


def guarded(events: Iterator[Event]) -> Iterator[Event]:
    """The engine's events, with running out of memory turned into one sentence."""
    try:
        yield from events
    except Exception as err:  # noqa: BLE001 - only memory errors are translated
        if out_of_memory(err):
            raise UserError("Ran out of memory while generating; try a shorter prompt, "
                            "fewer new tokens or a smaller model.") from err
        raise


def stamped(events: Iterator[Event], precision: dict[str, str | None], weights: str = "real") -> Iterator[Event]:
    """The events, with what each model ran in recorded in the start event's settings
    (``target_precision``, ``drafter_precision``: None where no drafter model drafts; and
    ``weights: "random"`` for a pair of random weights, :mod:`.shapes`), so a trace says
    what ran."""
    extra = {"weights": weights} if weights != "real" else {}
    for e in events:
        if isinstance(e, Start):
            e = dataclasses.replace(e, settings={**e.settings, "target_precision": precision["target"],
                                                 "drafter_precision": precision.get("drafter"), **extra})
        yield e


def run_mode(pair: Any, s: RunSettings, mode: str, *, clock: Callable[[], float] | None = None,
             stop: threading.Event | None = None, pause: Pause | None = None, schedule: Any = None,
             schedules: ScheduleCache | None = None, detokenize: bool = True) -> Iterator[Event]:
    """The engine's events for one mode of checked settings on ``pair``. The schedule
    is ``schedule`` if given, else the one of ``schedules`` (default: the pair's) for
    these settings, which carries what it learned across generations. ``detokenize=False``
    leaves the events' text empty: what a timed run measures (:mod:`mtp_viz.measure`),
    as transformers' reference decodes no text either."""
    from mtp_viz.engine import loop  # imports torch: only once a run starts
    # (a compiled pair compiles what this run needs before it starts: sources.compiling)
    if s.experts and not pair.is_moe:
        raise UserError(DENSE)
    ids = pair.encode(s.prompt, s.chat)
    if s.max_prompt_tokens and len(ids) > s.max_prompt_tokens:
        raise UserError(f"The prompt has {len(ids)} tokens; this deployment takes at most "
                        f"{s.max_prompt_tokens}.")
    if pair.context_length and len(ids) + s.max_new_tokens > pair.context_length:
        raise UserError(f"The prompt ({len(ids)} tokens) plus {s.max_new_tokens} new tokens exceeds "
                        f"the model's context of {pair.context_length} tokens.")
    common = dict(max_new_tokens=s.max_new_tokens, sampling=s.sampling, eos_token_ids=pair.eos_token_ids,
                  detok=Detokenizer(pair.tokenizer) if detokenize else None, stop=stop, top=s.top, experts=s.experts,
                  **({"clock": clock} if clock else {}))
    if mode == "autoregressive":
        prepare(pair, [s.only(mode)])
        return guarded(stamped(loop.autoregressive(pair.decoder, ids, **common), {"target": pair.precision["target"]},
                                       getattr(pair, "weights", "real")))
    d = pair.make_drafter(s.drafter)
    if schedule is None:
        schedule = (schedules or pair.schedules).get(s.schedule, d.kind, s.draft_tokens or d.default_draft_tokens,
                                                     MAX_DRAFT_TOKENS)
    if prepare(pair, [s.only(mode)], schedule=schedule):
        d = pair.make_drafter(s.drafter)  # on the draft step the pair has now (eager, had compiling failed)
    precision = pair.precision if DRAFTERS[d.kind].needs else {"target": pair.precision["target"]}  # lookup: no model
    return guarded(stamped(loop.speculative(pair.decoder, d, ids, schedule=schedule, stale_kv=s.stale_kv,
                                            pause=pause, **common), precision, getattr(pair, "weights", "real")))


def runs(pair: Any, s: RunSettings, stop: threading.Event | None = None, pause: Pause | None = None,
         schedules: ScheduleCache | None = None) -> Iterator[tuple[str, Event]]:
    """``(mode, event)`` of ``s.modes`` on ``pair``, taking turns on this thread, each on
    its own clock. On ZeroGPU this is the function that runs on the GPU
    (:mod:`mtp_viz.app.runtime.zerogpu`): one call, so a comparison holds one GPU for
    both of its modes."""
    now, basis = own_clock(pair.device)
    yield from interleave({mode: (lambda clock, mode=mode: run_mode(
        pair, s, mode, clock=clock, stop=stop, pause=pause if mode == "speculative" else None,
        schedules=schedules)) for mode in s.modes}, now=now, basis=basis)


class LocalSource(Source):
    """A model pair in this process. ``schedules``: whose memory adaptive schedules
    keep (a browser session's; default the pair's); ``call``: what runs the modes
    (:func:`runs`, or the same under ZeroGPU's decorator)."""
    capabilities = Capabilities(pausable=True, repeatable=True, experts=True)

    def __init__(self, pair: Any, schedules: ScheduleCache | None = None, call: Callable = runs):
        self.pair, self.schedules, self._call = pair, schedules, call
        self.name = pair.name

    def runs(self, s: RunSettings, stop: threading.Event | None = None,
             pause: Pause | None = None) -> Iterator[tuple[str, Event]]:
        yield from self._call(self.pair, self.check(s), stop, pause, self.schedules)


__all__ = ["DENSE", "LocalSource", "guarded", "out_of_memory", "run_mode", "runs"]
