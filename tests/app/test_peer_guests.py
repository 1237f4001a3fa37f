"""In the app, a peer server is a guest of Measure: while it runs (or stalls) it holds no
turn on the engine, so another visitor's Run goes ahead; Stop closes its stream; and the
operator's MTP_VIZ_PEERS past the limit stop the app at start, shown to no visitor. The
peer is a plain llama.cpp server of the standard library (tests/fake_llamacpp.py); the
pair a random one."""
from __future__ import annotations

import threading
import time

import pytest

import factories
from fake_llamacpp import llama_servers, stall, write
from forms import statuses, values
from mtp_viz.app.handlers import beside, local
from mtp_viz.app.runtime import deploy, runs, service
from mtp_viz.app.runtime.guard import ServerPolicy

PROMPT, N = "w10 w11 w12", 12
OPEN = deploy.AllowList("")


@pytest.fixture(scope="module")
def plain_ids(random_pair):   # what a peer of the same model writes
    return factories.plain_ids(random_pair, PROMPT, N)


def _handlers(pair, peers: str) -> local.Handlers:
    loader = service.PairLoader(lambda target, drafter, **kw: pair)
    return local.Handlers(loader, deploy.presets(loader.allow), ("tiny", None), cap=64, prompt_cap=64,
                          peers=beside.Peers(ServerPolicy(OPEN, ""), peers))


def _values(**kw):
    return values(prompt=PROMPT, max_new_tokens=N, **kw)


def test_a_run_goes_ahead_beside_a_stalled_peer_and_stop_ends_the_measure(random_pair, plain_ids):
    with llama_servers() as start:
        stalled = threading.Event()
        _, url = start(write(plain_ids), stall(plain_ids, seconds=30, started=stalled))
        h = _handlers(random_pair, url)
        measuring, frames = runs.Session(), []
        t = threading.Thread(target=lambda: frames.extend(h.measuring.measure(_values(), 3, measuring, None, url)),
                             daemon=True)
        t.start()
        assert stalled.wait(60)   # the peer's first timed run: one token, then only keep-alive comments

        t0 = time.monotonic()
        ran = list(h.run(_values(), runs.Session()))   # a second visitor's plain Run
        run_seconds = time.monotonic() - t0
        assert "Done." in statuses(ran)[-1] and t.is_alive()   # done while the peer still stalls
        assert run_seconds < 5

        stopped = time.monotonic()
        h.stop(measuring)
        t.join(10)   # a bound far under the stall's 30 s, not a timing
        stop_seconds = time.monotonic() - stopped
        assert not t.is_alive() and "Measure was stopped." in statuses(frames)[-1]
        assert stop_seconds < 1
        assert h.engine.waiting == 0 and not h.engine._line   # every turn given back
        print(f"Run beside a stalled peer: {run_seconds:.2f} s; Stop ended Measure in {stop_seconds:.2f} s")


def test_too_many_peers_are_refused_at_start_and_shown_to_no_visitor(monkeypatch, capsys):
    from mtp_viz.__main__ import main
    listed = ", ".join(f"http://10.0.0.{i}:8080" for i in range(6))
    monkeypatch.setenv("MTP_VIZ_PEERS", listed)
    monkeypatch.delenv("MTP_VIZ_DTYPE", raising=False)
    peers = beside.Peers(ServerPolicy(OPEN, ""))
    assert peers.default == "" and peers.configured == []   # the field a visitor sees shows none of them
    started = []
    monkeypatch.setattr(service.PairLoader, "start", lambda self, *a: started.append(a))
    from mtp_viz.app.page import layout
    monkeypatch.setattr(layout.App, "launch", lambda self, *a, **k: started.append("served"))   # never blocks
    assert main(["ui", "--target", "tiny"]) == 2
    assert capsys.readouterr().err.strip() == ("mtp-viz: error: MTP_VIZ_PEERS lists 6 peer servers; Measure times "
                                               "at most 4 beside the pair.")
    assert started == []
    monkeypatch.setenv("MTP_VIZ_PEERS", ", ".join(listed.split(", ")[:4]))
    assert len(beside.Peers(ServerPolicy(OPEN, "")).configured) == 4   # at the limit: served as before
