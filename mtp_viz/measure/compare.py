"""Measure: N interleaved repeats of both modes, off-screen, through the bench's own
runner and reduction, so the app's considered figure (and a notebook's) is the bench's
figure.

Beside the pair's own two modes, Measure can time other decoders of the same model in the
same rotation, as ``mtp-viz bench --compile --peer`` does: the compiled engine's plain
decoding (:class:`PlainArm`, on a pair compiled before any timed run) and peer servers
(:class:`mtp_viz.measure.peers.PeerArm`). Every speedup is then also read against the
fastest plain decoder measured (:func:`mtp_viz.measure.reduce.fastest`). Under greedy
decoding a peer whose untimed warm-up writes other tokens than this pair's plain decoding
serves another model: it is left out, with one sentence.
"""
from __future__ import annotations

import dataclasses
import statistics
import threading
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

from mtp_viz.errors import UserError
from mtp_viz.sources.base import WARM_UP_TOKENS
from mtp_viz.sources.settings import RunSettings

from .peers import PeerArm
from .records import AUTOREGRESSIVE, SPECULATIVE, Record, Setting
from .reduce import fastest, median, speedup_ratios, tps_by_repeat, verdict
from .runner import Runner
from .session import Task, rotated


@dataclass(frozen=True)
class DecoderRow:
    """A decoder Measure timed beside the pair's own two modes."""
    name: str                         # as a sentence names it: "the compiled engine", "llama.cpp"
    engine: str                       # what its runs' start events said ran: "compiled", "llamacpp", "vllm"
    setting: str                      # "plain", or "mtp" for a peer that speculates (its own drafter)
    tokens_per_second: float | None   # median over repeats
    clock: str                        # what its seconds read: "cpu" (a local engine's thread) or "wall"
    same_tokens_as_plain: bool | None = None   # greedy: it wrote the measured engine's plain tokens


@dataclass(frozen=True)
class Measurement:
    """N interleaved repeats of both modes, reduced as ``mtp-viz bench`` reduces them."""
    ratios: tuple[float, ...]          # per repeat: speculative tokens/s ÷ autoregressive
    spec_tps: float                    # medians over repeats
    ar_tps: float
    threads: int
    clock: str = "wall"                # what the runs' seconds read: "cpu" (the engine thread's) or "wall"
    beside: tuple[DecoderRow, ...] = ()   # the other decoders timed in the same rotation
    notes: tuple[str, ...] = ()        # one sentence per decoder left out (a peer of another model)
    engine: str = "this engine"        # the measured engine's plain decoding, as ``fastest_plain`` names it
    repeats: int = field(init=False)

    def __post_init__(self):
        object.__setattr__(self, "repeats", len(self.ratios))

    @property
    def median(self) -> float:
        return statistics.median(self.ratios)

    @property
    def spread(self) -> float:
        """max ÷ min of the per-repeat speedups."""
        return max(self.ratios) / min(self.ratios)

    @property
    def verdict(self) -> str:
        """"faster" or "slower" only when every repeat agrees (:func:`mtp_viz.measure.reduce.verdict`)."""
        return verdict(self.ratios)

    @property
    def fastest_plain(self) -> dict[str, Any] | None:
        """The fastest plain decoder measured (this engine's or one beside it), as the bench's."""
        return fastest({self.engine: self.ar_tps,
                        **{d.name: d.tokens_per_second for d in self.beside if d.setting == "plain"}})

    def over_fastest_plain(self, tokens_per_second: float | None) -> float | None:
        """A rate over the fastest plain decoder's (every row's "vs fastest plain")."""
        best = (self.fastest_plain or {}).get("tokens_per_second")
        return tokens_per_second / best if tokens_per_second and best else None


class PlainArm:
    """Another engine's plain decoding of the same models beside a Measure: the compiled
    engine, on a pair compiled before the first timed run (its graphs off the clock).
    What Measure reads of an arm beside the pair (as of :class:`~.peers.PeerArm`): its
    ``name`` and ``setting`` for its row, its ``mode``, ``run``, ``close``, and whether a
    failed warm-up leaves it out (``optional``) and greedy decoding must give this pair's
    plain tokens to keep it (``checked``): a server may serve another model, this does not."""
    mode, setting = AUTOREGRESSIVE, "plain"
    optional = checked = False

    def __init__(self, pair: Any, base: RunSettings):
        self.runner = Runner(pair, base)
        self.name, self.engine = f"the {pair.decoder.ran.label}", pair.decoder.ran.engine

    def run(self, mode: str, prompt: str, setting: Setting | None = None, n: int | None = None):
        """One timed run of its plain decoding, whatever ``mode`` asks."""
        return self.runner.run(AUTOREGRESSIVE, prompt, None, n)

    def close(self) -> None:
        self.runner.close()


def peer_base(pair: Any, s: RunSettings) -> RunSettings:
    """What a peer's runs share with a Measure's (:class:`PeerArm`'s ``base``): the new
    tokens, the sampling, and the chat template where this pair's runs apply one."""
    return RunSettings("", max_new_tokens=s.max_new_tokens, sampling=s.sampling,
                       chat=s.chat and getattr(pair, "chat_template", None) is not None)


def measure(pair: Any, s: RunSettings, repeats: int, stop: threading.Event | None = None,
            compiled: Any = None, peers: Sequence[PeerArm] = (), told: Callable[[UserError], str] = str
            ) -> Measurement:
    """Both modes of ``s`` on ``pair``, ``repeats`` times, rotating which goes first,
    off-screen: the bench's own runner, clock and reduction, after the untimed warm-up
    every surface makes. Beside them, in the same rotation: ``compiled``'s plain decoding
    (the same models on the compiled engine, every graph of these runs compiled already)
    and each of ``peers`` (:func:`peer_base` gives them these runs' settings); a peer
    whose warm-up fails is left out, its failure told by ``told``. Setting ``stop`` ends
    it with one sentence."""
    import torch
    base = dataclasses.replace(s, top=0, experts=False, stale_kv=False)  # timed as the bench times: no extras
    runner = Runner(pair, base)
    setting = Setting(s.schedule, s.draft_tokens or runner.drafter.default_draft_tokens)
    compiled_pair = PlainArm(compiled, base) if compiled is not None else None
    beside = ([compiled_pair] if compiled_pair else []) + list(peers)
    todo = [Task(SPECULATIVE, runner, setting), Task(AUTOREGRESSIVE, runner)]
    todo += [Task(arm.mode, arm) for arm in beside]   # a peer runs its one mode, on itself
    notes: list[str] = []
    try:
        # untimed warm-up, plain first; checks the prompt as every run does
        plain_ids = todo[1].run(s.prompt, WARM_UP_TOKENS)[0].ids
        todo[0].run(s.prompt, WARM_UP_TOKENS)
        for task in todo[2:]:
            try:
                ids = task.run(s.prompt, WARM_UP_TOKENS)[0].ids
            except UserError as e:   # a peer that fails before any timing is left out, not the Measure
                if not task.arm.optional:
                    raise
                said = told(e)
                notes.append(f"Measure left out {task.arm.name}, whose warm-up failed: {said[:1].lower()}{said[1:]}")
                todo.remove(task)
                continue
            if s.greedy and task.arm.checked and ids != plain_ids:
                notes.append(f"Left out {task.arm.name}: under greedy decoding it wrote other tokens than "
                             "this pair's plain decoding, so it does not serve this model.")
                todo.remove(task)
        records: dict[Task, list[Record]] = {task: [] for task in todo}
        for r in range(repeats):   # with two tasks: speculative first on even repeats, plain first on odd
            for task in rotated(todo, r):
                if stop is not None and stop.is_set():
                    raise UserError("Measure was stopped.")
                rec, _ = task.run(s.prompt)
                records[task].append(dataclasses.replace(rec, repeat=r))
    finally:
        runner.close()
        if compiled_pair is not None:
            compiled_pair.close()
    own = records[todo[0]] + records[todo[1]]
    tps = {m: statistics.median(x.new_tokens / x.seconds for x in own if x.mode == m)
           for m in (SPECULATIVE, AUTOREGRESSIVE)}
    plain = {x.repeat: x.ids for x in records[todo[1]]} if s.greedy else None
    rows = tuple(_row(task.arm, records[task], plain) for task in todo[2:])
    return Measurement(tuple(speedup_ratios(own, SPECULATIVE, setting.name)), tps[SPECULATIVE],
                       tps[AUTOREGRESSIVE], torch.get_num_threads(), own[0].clock, rows, tuple(notes),
                       pair.decoder.ran.label)


def _row(arm: Any, recs: list[Record], plain: dict[int, tuple] | None) -> DecoderRow:
    """A decoder's figures: its median rate over repeats (pooled per repeat, as the bench's)."""
    first = recs[0]
    rate = median(list(tps_by_repeat(recs, first.mode, first.setting).values()))
    same = None if plain is None else all(plain.get(r.repeat) in (None, r.ids) for r in recs)
    return DecoderRow(arm.name, first.engine or arm.engine, arm.setting, rate, first.clock, same)


__all__ = ["DecoderRow", "Measurement", "PlainArm", "measure", "peer_base"]
