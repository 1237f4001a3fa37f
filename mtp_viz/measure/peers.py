"""Peers: inference servers measured beside the local engines in one bench
(``mtp-viz bench --peer URL[,URL...]``), so every speedup can be read against the fastest
plain decoder of the same model measured in the same run, whoever it is.

A peer is a server of any kind a source reads (vLLM or llama.cpp, told apart by what it
answers: :func:`mtp_viz.sources.open_server`); one that speculates runs the speculative
mode with its own drafter and draft length, one that does not runs plain decoding. Its
runs are tasks of the bench like the local ones, interleaved prompt by prompt
(:func:`mtp_viz.measure.session.interleaved`). A peer's clock is the arrival of its own
stream: ``seconds`` from sending the request to the last token, ``prefill_seconds`` to
the first (so "decode" leaves out the prefill and the first token, as for the local runs).
"""
from __future__ import annotations

import dataclasses
import threading
from dataclasses import dataclass
from typing import Any, Sequence

from mtp_viz.analysis import metrics
from mtp_viz.errors import UserError
from mtp_viz.sources.http import ServerError, public
from mtp_viz.sources.settings import RunSettings

from .records import AUTOREGRESSIVE, SPECULATIVE, Record, RunKey, Setting
from .reduce import median, tps_by_repeat

PEER = "peer"   # a peer's runs' mode in the records (its source ran speculative or autoregressive)
STOPPED = "Measure was stopped."   # what a run says when its ``stop`` was set (Measure's Stop)


class PeerArm:
    """One server in a bench or a Measure (:class:`mtp_viz.measure.session.Measured`): it
    runs its one mode, on itself, and its records are mode :data:`PEER`. In a Measure
    (:mod:`.compare`) a failed warm-up leaves it out (``optional``), and under greedy
    decoding it is kept only if it writes the pair's plain tokens (``checked``): a server
    may serve another model."""
    optional = checked = True
    local = False   # it runs on its server, not on this machine's engine: it takes no turn there

    def __init__(self, url: str, base: RunSettings, index: int = 0, stop: threading.Event | None = None):
        from mtp_viz.sources import open_server
        from mtp_viz.sources.servers import Servers
        self.url, self.base, self.index, self.stop = url, base, index, stop   # ``stop`` closes its stream
        self.source = open_server(Servers(url, url))   # its one mode: speculative or plain, on itself
        self.speculates = self.source.speculates(url)
        self.software = self.source.label         # "vLLM" or "llama.cpp": what answered
        self.engine = ""                          # what its start event said ran (after a run)

    @property
    def mode(self) -> str:
        return SPECULATIVE if self.speculates else AUTOREGRESSIVE

    @property
    def name(self) -> str:
        """As a sentence names it: what answered ("llama.cpp", "vLLM"), and "#i" where
        several of that kind answered (:func:`numbered`)."""
        return self.software + (f" #{self.index}" if self.index else "")

    @property
    def setting(self) -> str:
        """Its row's setting: "mtp" (its own drafter) or "plain"."""
        return "mtp" if self.speculates else "plain"

    @property
    def label(self) -> str:
        """``<software> mtp`` or ``<software> plain`` (and ``#i`` as in :attr:`name`)."""
        return f"{self.software} {self.setting}" + (f" #{self.index}" if self.index else "")

    def serves_other(self, pair: Any) -> str:
        """One sentence where the server says it serves a model of another shape than the
        pair's target (vocabulary and width: its source's ``model_shape``), else ""; a
        server that says nothing checkable is checked by its tokens as every peer is."""
        from mtp_viz.engine.config import text_config
        got = self.source.model_shape(self.url, self.stop)
        t = text_config(pair.target.config)
        want = (int(t.vocab_size), int(t.hidden_size))
        if got is None or got == want:
            return ""
        return (f"{self.name} serves a model of {got[0]:,} tokens and width {got[1]:,}, not this pair's target "
                f"({want[0]:,} tokens, width {want[1]:,}): its rows measure another model.")

    def owns(self, key: RunKey) -> bool:
        return False   # a peer's runs are no local arm's

    def run(self, mode: str, prompt: str, setting: Setting | None = None, n: int | None = None):
        """One run on the server (its own mode, whatever ``mode`` asks), on its own
        stream's clock: ``(record, events)``. A set ``stop`` closes the stream: :data:`STOPPED`."""
        from mtp_viz.engine.events import Done, Start, Step
        s = dataclasses.replace(self.base, prompt=prompt, modes=(self.mode,),
                                max_new_tokens=n or self.base.max_new_tokens)
        events = list(self.source.events(s, self.stop))
        if self.stop is not None and self.stop.is_set():
            raise UserError(STOPPED)
        done = events[-1] if events else None
        if not isinstance(done, Done):
            raise ServerError(self.url, "{server} ended its stream without its last chunk.")
        start = next(e for e in events if isinstance(e, Start))
        self.engine = start.ran.engine
        first = next((e.t for e in events if isinstance(e, Step)), None)   # the first token's arrival
        return Record(PEER, done.seconds, done.new_tokens, done.target_forwards, tuple(done.generated_ids),
                      setting=self.label, prompt_tokens=start.prompt_tokens, prefill_seconds=first,
                      engine=self.engine), events

    def close(self) -> None:
        """Nothing to free: each run is one request."""


def numbered(peers: Sequence[PeerArm]) -> list[PeerArm]:
    """``peers``, each of a kind that answered more than once ("llama.cpp", "vLLM") numbered
    #1, #2, … in order, so that every peer has a name and a label of its own (its row, its
    records): the one numbering of the bench and the app."""
    kinds = [p.software for p in peers]
    for i, p in enumerate(peers):
        p.index = kinds[:i].count(p.software) + 1 if kinds.count(p.software) > 1 else 0
    return list(peers)


def open_peers(urls: Sequence[str], base: RunSettings, stop: threading.Event | None = None) -> list[PeerArm]:
    """The peers named (each server asked what it is and whether it speculates), :func:`numbered`."""
    return numbered([PeerArm(url, base, stop=stop) for url in urls])


@dataclass(frozen=True)
class PeerRow:
    """One peer's figures: bench.json's ``peers`` rows."""
    peer: str                   # its label ("llama.cpp mtp")
    engine: str                 # what its runs' start events said ran ("llamacpp", "vllm")
    url: str
    setting: str                # "mtp" (it speculates, with its own drafter) or "plain"
    tokens_per_second: float | None
    decode_tokens_per_second: float | None
    acceptance_rate: float | None
    tau: float | None           # tokens per target forward after the prefill
    same_tokens_as_plain: bool | None   # greedy: it wrote the local plain decoding's tokens
    speedup_over_fastest_plain: float | None = None

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def peer_rows(peers: Sequence[PeerArm], records: Sequence[Record], events: dict[RunKey, list],
              plain_ids: dict[tuple[str, int], tuple] | None) -> list[PeerRow]:
    """Each peer's row; ``plain_ids``: the local plain decoding's tokens by (prompt, repeat),
    to check a greedy peer against (None: not greedy)."""
    rows = []
    for p in peers:
        mine = [r for r in records if r.mode == PEER and r.setting == p.label]
        ev = [e for _, _, stream in events.get(RunKey(PEER, p.label, None, None, p.engine), []) for e in stream]
        summ = metrics.summarize(ev) if ev else None
        same = None if plain_ids is None else all(
            plain_ids.get((r.prompt_id, r.repeat)) in (None, r.ids) for r in mine)
        rows.append(PeerRow(
            p.label, p.engine, public(p.url), "mtp" if p.speculates else "plain",
            median(list(tps_by_repeat(mine, PEER, p.label).values())),
            median(list(tps_by_repeat(mine, PEER, p.label, decode=True).values())),
            summ.acceptance_rate if summ and p.speculates else None,
            summ.tau if summ and p.speculates else None, same))
    return rows


__all__ = ["PEER", "PeerArm", "PeerRow", "STOPPED", "numbered", "open_peers", "peer_rows"]
