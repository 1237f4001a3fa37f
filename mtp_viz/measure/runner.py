"""One timed run of a model pair, in any mode, with its record.

Our engine's modes run through the local source (:func:`mtp_viz.sources.local.run_mode`),
as every other run does, so what is measured is what the app and the CLI run; the
``reference`` mode is transformers' own assisted decoding,
``target.generate(ids, assistant_model=drafter, do_sample=False)``, with the draft length
set through ``assistant_model.generation_config.num_assistant_tokens`` (the only knob
transformers honours for this drafter) and a constant schedule.

Every run is timed the way the app's Run times its two modes, so the app, Measure, the
bench and a notebook read one number: on the run's own clock
(:func:`mtp_viz.sources.interleave.own_clock`: the engine thread's CPU time with one torch
thread on a CPU, wall time elsewhere), from the prefill to the last token, as the engine's
``done`` event reports it (``Done.seconds``; without detokenization, as transformers does
none either). The prompt is encoded and checked before the clock starts; a graph the
compiled engine compiled during the run (a shape first seen) is off the clock: compiling
is not decoding. Transformers' reference is timed on the same clock around its
``generate`` call.
"""
from __future__ import annotations

import dataclasses
import time
from typing import Any

from mtp_viz.engine.schedules import ScheduleCache
from mtp_viz.sources.settings import MAX_DRAFT_TOKENS, RunSettings

from .records import REFERENCE, SPECULATIVE, Record, Setting


class Runner:
    """Timed runs of ``pair``: ``run(mode, prompt, setting)`` returns ``(record, events)``
    (events None for the reference, which yields none). ``base``: what every run shares
    (drafter, new tokens, sampling, chat, stale_kv); each run sets its prompt, mode and
    setting. ``max_draft_tokens``: the adaptive schedules' cap. Adaptive schedules carry
    what they learn across this runner's runs (one per setting), as a pair's do."""
    local = True   # it runs on this machine's engine (Measure takes the engine's turn for it)

    def __init__(self, pair: Any, base: RunSettings, max_draft_tokens: int = MAX_DRAFT_TOKENS):
        self.pair, self.base, self.cap = pair, base, max_draft_tokens
        self.drafter = pair.make_drafter(base.drafter)   # its kind names the schedules' memory
        self.kind = self.drafter.kind
        self.schedules = ScheduleCache()
        self.forwards = 0
        self._ids: dict[tuple, list[int]] = {}
        self._hook = pair.target.register_forward_pre_hook(self._count)  # counts the reference's forwards

    def close(self) -> None:
        self._hook.remove()

    def _count(self, module, args):
        self.forwards += 1

    def encode(self, prompt: str) -> list[int]:
        """The prompt's ids as every run of this runner feeds them (cached)."""
        key = (prompt, self.base.chat)
        if key not in self._ids:
            self._ids[key] = self.pair.encode(prompt, self.base.chat)
        return self._ids[key]

    def run(self, mode: str, prompt: str, setting: Setting | None = None,
            n: int | None = None) -> tuple[Record, list | None]:
        """One timed run of ``mode`` on ``prompt`` (``n``: new tokens, default the base's);
        the record names its mode and setting."""
        n = n or self.base.max_new_tokens
        if mode == REFERENCE:
            rec, events = self._reference(prompt, setting.draft_tokens, n), None
        else:
            rec, events = self._ours(mode, prompt, setting, n)
        named = (dict(setting=setting.name, schedule=setting.schedule, draft_tokens=setting.draft_tokens)
                 if setting else {})
        return dataclasses.replace(rec, mode=mode, **named), events

    def _ours(self, mode: str, prompt: str, setting: Setting | None, n: int):
        from mtp_viz.sources.interleave import running_clock
        from mtp_viz.sources.local import run_mode
        s = dataclasses.replace(self.base, prompt=prompt, modes=(mode,), max_new_tokens=n)
        schedule = None
        if mode == SPECULATIVE:
            cap = max(self.cap, setting.draft_tokens)
            s = dataclasses.replace(s, schedule=setting.schedule, draft_tokens=setting.draft_tokens)
            schedule = self.schedules.get(setting.schedule, self.kind, setting.draft_tokens, cap)
        clock = running_clock(self.pair.device)
        stream = run_mode(self.pair, s, mode, schedule=schedule, detokenize=False, clock=clock)  # checked: untimed
        return _timed(mode, stream, clock.basis)

    def _reference(self, prompt: str, draft_tokens: int, n: int) -> Record:
        import torch

        from mtp_viz.sources.interleave import own_clock
        now, basis = own_clock(self.pair.device)
        ids = self.encode(prompt)
        assistant = self.pair.drafter_model
        gc = assistant.generation_config
        saved = (gc.num_assistant_tokens, gc.num_assistant_tokens_schedule)
        gc.num_assistant_tokens, gc.num_assistant_tokens_schedule = draft_tokens, "constant"
        model = self.pair.target
        x = torch.tensor([ids], device=model.device)
        eos = list(self.pair.eos_token_ids or ()) or None
        pad = model.generation_config.pad_token_id
        try:
            self.forwards = 0
            t, cpu = now(), time.process_time()
            with torch.inference_mode():
                out = model.generate(
                    input_ids=x, attention_mask=torch.ones_like(x), assistant_model=assistant,
                    do_sample=False, max_new_tokens=n, eos_token_id=eos,
                    pad_token_id=pad if pad is not None else (eos[0] if eos else 0))
            seconds, cpu = now() - t, time.process_time() - cpu
        finally:
            gc.num_assistant_tokens, gc.num_assistant_tokens_schedule = saved
        gen = out[0, len(ids):].tolist()
        return Record(REFERENCE, seconds, len(gen), self.forwards, tuple(gen), cpu_seconds=cpu, clock=basis)


def _timed(mode: str, stream, basis: str) -> tuple[Record, list]:
    """Runs ``stream`` to its end: its record (the engine's own time for it, on a clock
    that reads ``basis``) and its events."""
    from mtp_viz.engine.events import Done, Step
    cpu = time.process_time()
    events = list(stream)
    done = events[-1]
    if not isinstance(done, Done):
        raise RuntimeError(f"engine stopped without a done event: {done!r}")
    # the engine's clock already left out a graph compiled in this run; process time did not
    cpu = time.process_time() - cpu - done.compile_seconds
    # Step 1 is the prefill in both of our modes: its time, to separate out decoding.
    prefill = next((e.verify_seconds for e in events if isinstance(e, Step)), 0.0)
    return Record(mode, done.seconds, done.new_tokens, done.target_forwards, tuple(done.generated_ids),
                  cpu_seconds=cpu, prefill_seconds=prefill, clock=basis), events


__all__ = ["Runner"]
