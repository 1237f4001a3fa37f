"""What Measure times beside the picked pair's two modes: another engine's plain decoding of
the same models (``#measure-beside``: any engine of :data:`mtp_viz.engine.engines.ENGINES`) and
peer servers of the same model (``#measure-peers``, prefilled from ``MTP_VIZ_PEERS``), as
``mtp-viz bench --engine compiled --peer`` does (:mod:`mtp_viz.measure.compare`). No torch here.

Every peer URL goes through the server guard (:class:`mtp_viz.app.runtime.guard.ServerPolicy`);
the operator's own ``MTP_VIZ_PEERS`` are allowed as listed (more than :data:`MAX_PEERS` of
them: the app refuses to start, and shows visitors none). Peers are guests: their runs hold
no turn on the engine (:class:`mtp_viz.app.runtime.turns.Held`), and Stop closes their
streams. A peer is named by its place
in the field ("peer 2"), never by its address or what it answered: a peer that cannot be
reached or is no vLLM or llama.cpp server is left out with one sentence, and the Measure
goes on with the rest.
"""
from __future__ import annotations

import os
from typing import Any, Callable, Sequence

from mtp_viz.app.runtime import loading, runs, work
from mtp_viz.app.runtime.guard import ServerPolicy, canonical
from mtp_viz.app.runtime.turns import Held
from mtp_viz.engine.engines import ENGINES
from mtp_viz.errors import UserError
from mtp_viz.measure import compare
from mtp_viz.measure.peers import STOPPED, PeerArm, numbered
from mtp_viz.sources.http import ServerError
from mtp_viz.sources.settings import RunSettings
from mtp_viz.views import stats
from mtp_viz.views.frame import Frame

from . import form
from .frames import message, outputs

MAX_PEERS = 4   # peers one Measure may time: each adds a run to every repeat


class Peers:
    """The peer servers this deployment's Measure may time."""

    def __init__(self, policy: ServerPolicy, spec: str | None = None):
        spec = os.environ.get("MTP_VIZ_PEERS", "") if spec is None else spec
        self.policy = policy
        self.configured: list[str] = []
        entries = [e.strip() for e in spec.split(",") if e.strip()]
        # the operator's sentence (launch refuses to start on it); visitors are shown none of them
        self.refused = (f"MTP_VIZ_PEERS lists {len(entries)} peer servers; Measure times at most {MAX_PEERS} "
                        "beside the pair." if len(entries) > MAX_PEERS else "")
        for entry in entries if not self.refused else ():
            try:
                self.configured.append(canonical(entry))
            except UserError:   # not a server URL: matches nothing (as MTP_VIZ_VLLM_URLS' entries)
                continue

    def check_deployment(self) -> None:
        """The operator's configuration, checked before the app serves: one sentence."""
        if self.refused:
            raise UserError(self.refused)

    @property
    def default(self) -> str:
        """``#measure-peers``' first value: the configured peers."""
        return ", ".join(self.configured)

    def check(self, value: Any) -> list[str]:
        """The field's URLs, canonical and allowed, or one sentence."""
        urls = [u.strip() for u in form.text(value if value is not None else "", "The peer servers").split(",")]
        urls = [u for u in urls if u]
        if len(urls) > MAX_PEERS:
            raise UserError(f"Measure times at most {MAX_PEERS} peer servers beside the pair.")
        out: list[str] = []
        for url in urls:
            base = canonical(url)
            base = base if base in self.configured else self.policy.check(url)
            if base not in out:
                out.append(base)
        return out


def engine_choices(offered: Sequence[str], engine: str) -> list[tuple[str, str]]:
    """``#measure-beside``'s choices while the run's engine is ``engine``: none, then each engine of
    ``offered`` (the deployment's, in the table's order) but that one, as the table labels it."""
    return [(form.NO_ENGINE, form.NO_ENGINE), *((ENGINES[e].label, e) for e in offered if e != engine)]


def name(urls: Sequence[str], url: str) -> str:
    """A peer as a visitor's sentence names it: by its place in the field."""
    return f"peer {urls.index(url) + 1}" if url in urls else "a peer"


def failure(urls: Sequence[str], e: ServerError) -> str:
    """A peer's failure as a visitor's sentence: no address, no HTTP status, no path."""
    who = name(urls, e.url)
    said = e.visitor(who, f"{who}'s address")
    return said[:1].upper() + said[1:]


def open_peers(urls: Sequence[str], base: RunSettings, stop: Any = None) -> tuple[list[PeerArm], list[str]]:
    """Each peer asked what it is and whether it speculates; one that does not answer as a
    vLLM or llama.cpp server is left out with its sentence. Several of one kind are
    numbered as the bench numbers them (:func:`mtp_viz.measure.peers.numbered`); ``stop``
    closes their streams."""
    peers: list[PeerArm] = []
    notes: list[str] = []
    for url in urls:
        if stop is not None and stop.is_set():
            raise UserError(STOPPED)
        try:
            p = PeerArm(url, base, stop=stop)
        except ServerError as e:
            notes.append(f"Measure left out {name(urls, url)}: {_lower(failure(urls, e))}")
            continue
        except Exception:  # noqa: BLE001 - whatever it answered, it is no server of ours: one sentence
            notes.append(f"Measure left out {name(urls, url)}: it does not answer as a vLLM or llama.cpp server.")
            continue
        peers.append(p)
    return numbered(peers), notes


class Measuring:
    """Measure's handler: composed of the page's :class:`.gate.Gate` (the pair, its waits and
    the engine's turn), the peers it may time beside the pair, and the form check."""

    def __init__(self, gate: Any, peers: Peers, settings: Callable[[dict[str, Any]], Any]):
        self.gate, self.peers, self.settings = gate, peers, settings

    def measure(self, values: dict[str, Any], repeats: Any, sess: runs.Session | None, beside: Any = None,
                peers: Any = None):
        """N interleaved repeats of both modes, off-screen; the median and its spread.
        Beside them, in the same rotation, another engine's plain decoding of the same models
        (``beside``: ``#measure-beside``, an engine's name or ``"none"``) and the peer servers
        (``peers``: ``#measure-peers``), each against the fastest plain decoder measured (:mod:`.beside`)."""
        sess = sess or runs.Session()
        sess.stop.clear()
        try:
            s = self.settings(values)
            spec = self.gate.asked_by(values)
            n = form.whole(repeats, "Repeats")
            if not 2 <= n <= 15:
                raise UserError("Measure takes between 2 and 15 repeats.")
            other = form.beside_of(beside)
            other = None if other == spec.engine else other   # the pair's own engine is measured already
            if other is not None:
                self.gate.loader.allow.check_build(spec.precision, other)
            urls = self.peers.check(peers)
            for item in self.gate.enter(spec, sess, s.only("speculative", "autoregressive"), other):
                if isinstance(item, Frame):
                    yield outputs(item, sess)
                else:
                    pair, ticket = item
            pair, other_pair = pair if other is not None else (pair, None)
        except UserError as e:
            yield outputs(message(str(e), level="error"), sess)
            return
        turn = Held(self.gate.engine, ticket, sess.stop, STOPPED)   # held for the local runs only
        # the same models on the other engine, unless they fell back to eager decoding (its sentence says why)
        notes = [f"Measure left out the {ENGINES[other].label}: {_lower(other_pair.compile_note)}"] \
            if other_pair is not None and other_pair.compile_note and other_pair.engine != other else []
        other_pair = None if notes else other_pair
        arms: list = []
        try:
            for line in loading.compile_lines(other_pair, s.only("autoregressive"), sess.stop) if other_pair else ():
                yield outputs(Frame(status=line), sess)
            if urls:
                turn.give()   # asking servers needs no engine
                yield outputs(message("Asking the peer servers what they are…"), sess)
                arms, left = open_peers(urls, compare.peer_base(pair, s), sess.stop)
                notes += left
            more = len(arms) + (other_pair is not None)
            yield outputs(message(f"Measuring: {n} repeats of both modes" + (
                f" and of {more} decoder{'s' if more > 1 else ''} beside them" if more else "")
                + ", in turns, nothing rendered meanwhile…"), sess)
            with work.working(sess.stop):  # the app's close stops it first
                m = compare.measure(pair, s, n, sess.stop, beside=other_pair, peers=arms, turn=turn,
                                    told=lambda e: failure(urls, e) if isinstance(e, ServerError) else str(e))
        except ServerError as e:   # a peer that failed mid-way: named by its place, never its address
            yield outputs(message(failure(urls, e), level="error"), sess)
            return
        except UserError as e:
            yield outputs(message(str(e), level="error"), sess)
            return
        finally:
            turn.leave()
        sess.remember(spec.weights, m.beside)
        notes += m.notes
        yield outputs(Frame(compare=stats.measurement_html(m, engine=pair.decoder.ran),
                            measured=stats.measure_result_html(m, engine=pair.decoder.ran)) | message(
            f"Measured {n} repeats of each mode (spread ×{m.spread:.2f} between the fastest and slowest "
            "repeat's speedup)." + "".join(" " + x for x in notes), level="warn" if notes else "info"))


def _lower(sentence: str) -> str:
    return sentence[:1].lower() + sentence[1:]


__all__ = ["MAX_PEERS", "Measuring", "Peers", "engine_choices", "failure", "name", "open_peers"]
