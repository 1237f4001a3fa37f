"""Measure: N interleaved repeats of both modes, off-screen, through the bench's own
runner and reduction, so the app's considered figure (and a notebook's) is the bench's
figure.

Beside the pair's own two modes, Measure can time other decoders of the same model in the
same rotation, as ``mtp-viz bench --engine compiled --peer`` does: another engine's plain
decoding (:class:`PlainArm`, the compiled engine's on a pair compiled before any timed run) and peer servers
(:class:`mtp_viz.measure.peers.PeerArm`). Every speedup is then also read against the
fastest plain decoder measured (:func:`mtp_viz.measure.reduce.fastest`). Under greedy
decoding a peer whose untimed warm-up writes other tokens than this pair's plain decoding
serves another model: it is left out, with one sentence; one that writes other tokens in
a timed run is marked and never the fastest plain decoder.

Peers are guests: their runs hold no turn on this machine's engine (``turn``), Stop closes
their streams, and one that fails is a sentence while the pair's repeats stand.
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

from .peers import STOPPED, PeerArm
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
    same_tokens_as_plain: bool | None = None   # greedy: it wrote the measured engine's plain tokens in every run
    failed: str = ""                  # why it has no rate: a peer that failed in a timed run (a visitor's sentence)


@dataclass(frozen=True)
class Measurement:
    """N interleaved repeats of both modes, reduced as ``mtp-viz bench`` reduces them."""
    ratios: tuple[float, ...]          # per repeat: speculative tokens/s ÷ autoregressive
    spec_tps: float                    # medians over repeats
    ar_tps: float
    threads: int
    clock: str = "wall"                # what the runs' seconds read: "cpu" (the engine thread's) or "wall"
    beside: tuple[DecoderRow, ...] = ()   # the other decoders timed in the same rotation
    notes: tuple[str, ...] = ()        # one sentence per decoder left out, failed or marked
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
        """The fastest plain decoder measured (this engine's or one beside it), as the bench's;
        never one that wrote other tokens than this engine's plain decoding."""
        return fastest({self.engine: self.ar_tps, **{d.name: d.tokens_per_second for d in self.beside
                                                     if d.setting == "plain" and d.same_tokens_as_plain is not False}})

    def over_fastest_plain(self, tokens_per_second: float | None) -> float | None:
        """A rate over the fastest plain decoder's (every row's "vs fastest plain")."""
        best = (self.fastest_plain or {}).get("tokens_per_second")
        return tokens_per_second / best if tokens_per_second and best else None


class PlainArm:
    """Another engine's plain decoding of the same models beside a Measure (one that compiles
    on a pair compiled before the first timed run: its graphs off the clock).
    What Measure reads of an arm beside the pair (as of :class:`~.peers.PeerArm`): its
    ``name`` and ``setting`` for its row, its ``mode``, ``run``, ``close``, and whether a
    failed warm-up leaves it out (``optional``) and greedy decoding must give this pair's
    plain tokens to keep it (``checked``): a server may serve another model, this does not."""
    mode, setting = AUTOREGRESSIVE, "plain"
    optional = checked = False
    local = True   # it runs on this machine's engine: it takes the engine's turn

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


class Alone:
    """The machine is Measure's alone (a notebook, a script): no line to give a turn back to.
    What :func:`measure` asks of its ``turn``: ``take()`` before a run on this machine's
    engine (waiting for it, as long as it takes), ``give()`` before a peer's run, which
    needs no turn (:class:`mtp_viz.app.runtime.turns.Held` is the app's)."""

    def take(self) -> None:
        pass

    def give(self) -> None:
        pass


def measure(pair: Any, s: RunSettings, repeats: int, stop: threading.Event | None = None,
            beside: Any = None, peers: Sequence[PeerArm] = (), told: Callable[[UserError], str] = str,
            turn: Any = None) -> Measurement:
    """Both modes of ``s`` on ``pair``, ``repeats`` times, rotating which goes first,
    off-screen: the bench's own runner, clock and reduction, after the untimed warm-up
    every surface makes. Beside them, in the same rotation: ``beside``'s plain decoding
    (the same models on another engine, every graph of these runs compiled already where it compiles)
    and each of ``peers`` (:func:`peer_base` gives them these runs' settings). A peer is a
    guest: its runs hold no ``turn`` on this machine's engine (:class:`Alone`), one that
    fails (warm-up or later) is a note, its failure told by ``told``, and the rest stands;
    one whose tokens differ is marked (:attr:`Measurement.fastest_plain` skips it).
    Setting ``stop`` ends it with one sentence, a peer's stream too."""
    import torch
    base = dataclasses.replace(s, top=0, experts=False, stale_kv=False)  # timed as the bench times: no extras
    runner = Runner(pair, base)
    setting = Setting(s.schedule, s.draft_tokens or runner.drafter.default_draft_tokens)
    other = PlainArm(beside, base) if beside is not None else None
    todo = [Task(SPECULATIVE, runner, setting), Task(AUTOREGRESSIVE, runner)]
    todo += [Task(arm.mode, arm) for arm in ([other] if other else []) + list(peers)]   # each its one mode
    rounds = _Rounds(s.prompt, stop, told, turn or Alone())
    try:
        plain_ids = rounds.warm_up(todo)
        rounds.notes += [n for n in (arm.serves_other(pair) for arm in peers) if n]   # named, kept: tokens decide
        if s.greedy:   # a server that writes other tokens serves another model
            for task, ids in list(rounds.warm.items()):
                if task.arm.checked and ids != plain_ids:
                    rounds.notes.append(f"Left out {task.arm.name}: under greedy decoding it wrote other tokens "
                                        "than this pair's plain decoding, so it does not serve this model.")
                    todo.remove(task)
        records = rounds.timed(todo, repeats)
    finally:
        runner.close()
        if other is not None:
            other.close()
    own = records[todo[0]] + records[todo[1]]
    tps = {m: statistics.median(x.new_tokens / x.seconds for x in own if x.mode == m)
           for m in (SPECULATIVE, AUTOREGRESSIVE)}
    plain = {x.repeat: x.ids for x in records[todo[1]]} if s.greedy else None
    rows = tuple(_row(task.arm, records[task], plain, rounds.failed.get(task, "")) for task in todo[2:])
    rounds.notes += [f"{d.name} wrote other tokens than this pair's plain decoding in a timed run: "
                     "marked, and not taken as the fastest plain decoder."
                     for d in rows if d.same_tokens_as_plain is False]
    return Measurement(tuple(speedup_ratios(own, SPECULATIVE, setting.name)), tps[SPECULATIVE],
                       tps[AUTOREGRESSIVE], torch.get_num_threads(), own[0].clock, rows, tuple(rounds.notes),
                       pair.decoder.ran.label)


class _Rounds:
    """Measure's runs: each on its own terms (a local one holding the engine's ``turn``, a
    peer's giving it back), a peer's failure kept as a note rather than raised."""

    def __init__(self, prompt: str, stop: threading.Event | None, told: Callable[[UserError], str], turn: Any):
        self.prompt, self.stop, self.told, self.turn = prompt, stop, told, turn
        self.notes: list[str] = []
        self.warm: dict[Task, tuple] = {}   # each arm beside's warm-up tokens
        self.failed: dict[Task, str] = {}   # an arm beside that failed in a timed run: its sentence

    def stopped(self) -> bool:
        return self.stop is not None and self.stop.is_set()

    def run(self, task: Task, n: int | None = None) -> Record:
        if self.stopped():
            raise UserError(STOPPED)
        (self.turn.take if task.arm.local else self.turn.give)()
        return task.run(self.prompt, n)[0]

    def guest(self, task: Task, n: int | None = None) -> Record | None:
        """A run of an arm beside; None, with its sentence kept, where an optional one failed."""
        try:
            return self.run(task, n)
        except UserError as e:
            if self.stopped():   # whatever the stream said as it was closed
                raise UserError(STOPPED) from None
            if not task.arm.optional:
                raise
            said = self.told(e)
            self.failed[task] = said[:1].lower() + said[1:]
            return None

    def warm_up(self, todo: list[Task]) -> tuple:
        """Every task once, untimed and short, plain first (it checks the prompt as every run
        does); an arm beside that fails is left out. Returns the plain tokens."""
        plain_ids = self.run(todo[1], WARM_UP_TOKENS).ids
        self.run(todo[0], WARM_UP_TOKENS)
        for task in todo[2:]:
            rec = self.guest(task, WARM_UP_TOKENS)
            if rec is None:
                self.notes.append(f"Measure left out {task.arm.name}, whose warm-up failed: {self.failed.pop(task)}")
                todo.remove(task)
            else:
                self.warm[task] = rec.ids
        return plain_ids

    def timed(self, todo: list[Task], repeats: int) -> dict[Task, list[Record]]:
        """``repeats`` rounds (with two tasks: speculative first on even repeats, plain first
        on odd); an arm beside that fails leaves the rotation, its runs dropped."""
        records: dict[Task, list[Record]] = {task: [] for task in todo}
        for r in range(repeats):
            for task in rotated([t for t in todo if t not in self.failed], r):
                rec = self.guest(task)
                if rec is None:
                    records[task] = []
                    self.notes.append(f"Measure left out {task.arm.name} from repeat {r + 1} on, as it failed: "
                                      f"{self.failed[task]}")
                else:
                    records[task].append(dataclasses.replace(rec, repeat=r))
        return records


def _row(arm: Any, recs: list[Record], plain: dict[int, tuple] | None, failed: str = "") -> DecoderRow:
    """A decoder's figures: its median rate over repeats (pooled per repeat, as the bench's);
    one that failed has none, and its sentence."""
    if failed or not recs:
        return DecoderRow(arm.name, arm.engine, arm.setting, None, "wall", None, failed)
    first = recs[0]
    rate = median(list(tps_by_repeat(recs, first.mode, first.setting).values()))
    same = None if plain is None else all(plain.get(r.repeat) in (None, r.ids) for r in recs)
    return DecoderRow(arm.name, first.engine or arm.engine, arm.setting, rate, first.clock, same)


__all__ = ["Alone", "DecoderRow", "Measurement", "PlainArm", "measure", "peer_base"]
