"""Peers are guests of a Measure and of a bench: numbered each with a label of its own, run
without the engine's turn, stopped with it, noted when they fail, marked (never the
fastest plain decoder) when they write other tokens. The peers are plain llama.cpp
servers of the standard library (tests/fake_llamacpp.py); the pair is a random one."""
from __future__ import annotations

import threading
import time

import pytest

import factories
from fake_llamacpp import fail, llama_servers, stall, write
from mtp_viz.errors import UserError
from mtp_viz.measure import compare, peers
from mtp_viz.measure.records import AUTOREGRESSIVE
from mtp_viz.measure.runner import Runner
from mtp_viz.sources.settings import RunSettings

PROMPT, N = "w10 w11 w12", 12


@pytest.fixture(scope="module")
def plain_ids(random_pair):   # what a peer of the same model writes
    return factories.plain_ids(random_pair, PROMPT, N)


@pytest.fixture
def start():
    with llama_servers() as start:
        yield start


def _settings() -> RunSettings:
    return RunSettings(PROMPT, max_new_tokens=N, chat=False)


def _peers(pair, urls, stop=None):
    return peers.open_peers(urls, compare.peer_base(pair, _settings()), stop)


def test_peers_of_one_kind_each_get_their_own_label_and_records(start):
    urls = [start(write(range(20, 40)))[1] for _ in range(3)]
    arms = peers.open_peers(urls, RunSettings("", max_new_tokens=4, chat=False))
    assert [p.label for p in arms] == ["llama.cpp plain #1", "llama.cpp plain #2", "llama.cpp plain #3"]
    assert len({p.name for p in arms}) == 3
    records = [p.run(AUTOREGRESSIVE, PROMPT)[0] for p in arms]
    rows = peers.peer_rows(arms, records, {}, None)
    assert [r.peer for r in rows] == [p.label for p in arms]
    assert all(r.tokens_per_second is not None for r in rows)   # each of its own one run, none pooled
    assert [p.index for p in peers.numbered(arms[:1])] == [0]   # one of its kind: no number


def test_the_app_numbers_peers_as_the_bench_does(start):
    from mtp_viz.app.handlers import beside
    urls = [start(write(range(20, 40)))[1] for _ in range(3)]
    arms, notes = beside.open_peers(urls, RunSettings("", max_new_tokens=4, chat=False))
    assert notes == [] and [p.name for p in arms] == ["llama.cpp #1", "llama.cpp #2", "llama.cpp #3"]


def test_a_peer_that_fails_after_its_warm_up_is_a_note_and_the_pairs_repeats_stand(random_pair, plain_ids, start):
    server, url = start(write(plain_ids), fail(500))
    m = compare.measure(random_pair, _settings(), 2, peers=_peers(random_pair, [url]))
    assert m.repeats == 2 and m.spec_tps > 0 and m.ar_tps > 0   # the pair's own repeats are kept
    [row] = m.beside
    assert row.tokens_per_second is None and "HTTP 500" in row.failed
    assert any(n.startswith("Measure left out llama.cpp from repeat 1 on, as it failed") for n in m.notes)
    assert m.fastest_plain["decoder"] == m.engine
    assert len(server.completions) == 2   # its warm-up, then one failure: not asked again


def test_a_peer_that_writes_other_tokens_in_a_timed_run_is_marked_and_never_the_baseline(random_pair, plain_ids, start):
    other = [t + 1 for t in plain_ids]
    _, url = start(write(plain_ids), write(other))   # the pair's tokens for the warm-up only
    m = compare.measure(random_pair, _settings(), 2, peers=_peers(random_pair, [url]))
    [row] = m.beside
    assert row.same_tokens_as_plain is False
    assert row.tokens_per_second > m.ar_tps   # faster than this engine (it writes from memory), and still:
    assert m.fastest_plain["decoder"] == m.engine
    assert any("wrote other tokens than this pair's plain decoding in a timed run" in n for n in m.notes)
    from mtp_viz.views import stats
    assert stats.faster_plain(m.beside, "eager", m.ar_tps) is None   # Run's sentence never names it


def test_the_bench_never_takes_a_peer_with_other_tokens_as_its_fastest_plain():
    from mtp_viz.measure.arms import fastest
    from mtp_viz.measure.reduce import PlainRow
    local = PlainRow(100.0, 40, None)
    row = peers.PeerRow("llama.cpp plain", "llamacpp", "http://s", "plain", 5000.0, None, None, None, False)
    assert fastest({"float32": local}, [row])["decoder"] == "mtp-viz float32"
    ok = peers.PeerRow("llama.cpp plain", "llamacpp", "http://s", "plain", 5000.0, None, None, None, True)
    assert fastest({"float32": local}, [ok])["decoder"] == "llama.cpp plain"


class Turn:
    """A turn that says whether it is held; the peer's server looks at it as it answers."""
    def __init__(self):
        self.holding = True

    def take(self):
        self.holding = True

    def give(self):
        self.holding = False


def test_a_peers_runs_hold_no_turn_on_the_engine_and_the_pairs_runs_do(random_pair, plain_ids, start, monkeypatch):
    turn, seen, local = Turn(), [], []
    answer = write(plain_ids)

    def watched(h, n):
        seen.append(turn.holding)
        answer(h, n)
    real_run = Runner.run
    monkeypatch.setattr(Runner, "run", lambda self, *a, **k: local.append(turn.holding) or real_run(self, *a, **k))
    _, url = start(watched)
    m = compare.measure(random_pair, _settings(), 2, peers=_peers(random_pair, [url]), turn=turn)
    assert m.beside[0].same_tokens_as_plain is True
    assert len(seen) == 3 and not any(seen)   # warm-up and both repeats, none holding the turn
    assert len(local) == 6 and all(local)     # the pair's warm-ups and timed runs, each holding it


@pytest.mark.parametrize("every", [0.1, 60.0], ids=["keep-alive comments", "silent"])
def test_stop_closes_a_stalled_peers_stream_and_ends_the_measure(random_pair, plain_ids, start, every):
    """A peer that stalls after its first token, with keep-alive comments or in silence:
    Stop ends the Measure long before any deadline (every wait polls the stop)."""
    stop, stalled = threading.Event(), threading.Event()
    _, url = start(write(plain_ids), stall(plain_ids, seconds=30, every=every, started=stalled))
    out: dict = {}

    def measure():
        try:
            compare.measure(random_pair, _settings(), 3, stop, peers=_peers(random_pair, [url], stop))
        except UserError as e:
            out["error"], out["at"] = str(e), time.monotonic()
    t = threading.Thread(target=measure, daemon=True)
    t.start()
    assert stalled.wait(60)
    time.sleep(0.3)   # the peer's stream is open, silent but for keep-alive comments
    stopped = time.monotonic()
    stop.set()
    t.join(10)   # a bound far under the stall's 30 s, not a timing
    assert not t.is_alive() and out["error"] == "Measure was stopped."
    print(f"Stop ended the Measure in {out['at'] - stopped:.2f} s")


def test_a_peer_ending_its_stream_without_its_last_chunk_is_one_sentence():
    arm = object.__new__(peers.PeerArm)
    arm.url, arm.base, arm.stop, arm.index, arm.software, arm.speculates = "http://s", _settings(), None, 0, "x", False
    arm.source = type("S", (), {"events": staticmethod(lambda s, stop=None: iter(()))})()
    with pytest.raises(UserError, match="ended its stream without its last chunk"):
        arm.run(AUTOREGRESSIVE, PROMPT)



def test_a_peer_that_says_it_serves_another_shape_is_named(random_pair, plain_ids, start):
    """llama.cpp's /v1/models names the served model's vocabulary and width: where they are
    not the pair's target's, Measure's notes say so (the tokens still decide what is kept)."""
    from mtp_viz.engine.config import text_config
    t = text_config(random_pair.target.config)
    same = (t.vocab_size, t.hidden_size)
    _, other = start(write(plain_ids), shape=(t.vocab_size, t.hidden_size + 64))
    _, alike = start(write(plain_ids), shape=same)
    m = compare.measure(random_pair, _settings(), 1, peers=_peers(random_pair, [other, alike]))
    named = [n for n in m.notes if "serves a model of" in n]
    assert len(named) == 1 and f"width {t.hidden_size + 64:,}" in named[0] and "#1" in named[0], m.notes
