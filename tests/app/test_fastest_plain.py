"""The speedup figures name a faster plain decoder of the same model (``#fastest-plain``,
``data-fastest-plain``) only when one was measured; Measure's table of every decoder
(``#measure-decoders``) against the fastest plain one; and the bad input of Measure's
peers (a non-URL, a locked deployment, a server that is not there or is no server of
ours): one sentence that never shows the address. Pure views, the handlers' checks, and
real sockets; the run against a real llama-server is tests/app/test_measure_beside.py."""
from __future__ import annotations

import dataclasses
import html
import http.server
import re
import socket
import threading

import pytest

from forms import statuses, values
from mtp_viz.app.handlers import beside, local
from mtp_viz.app.runtime import deploy, runs, service
from mtp_viz.app.runtime.guard import ServerPolicy
from mtp_viz.engine.events import Ran
from mtp_viz.errors import UserError
from mtp_viz.measure import arms, reduce
from mtp_viz.measure.compare import DecoderRow, Measurement
from mtp_viz.sources.settings import RunSettings
from mtp_viz.views import stats
from streams import EVIL, ar_run, spec_run

OPEN = deploy.AllowList("")


def _plain_tps() -> float:
    return stats.run_stats(ar_run()).tokens_per_second


def _compare(faster=()) -> str:
    return stats.compare_html(stats.run_stats(spec_run()), stats.run_stats(ar_run()), greedy=True, faster=faster)


def _decoder(name="llama.cpp", engine="llamacpp", setting="plain", tps=None, clock="wall", same=True):
    return DecoderRow(name, engine, setting, tps if tps is not None else 3 * _plain_tps(), clock, same)


def _fastest(page: str) -> dict[str, str]:
    m = re.search(r'<span id="fastest-plain"([^>]*)>(.*?)</span>', page)
    return {} if m is None else {**dict(re.findall(r'(data-[\w-]+)="([^"]*)"', m.group(1))), "text": m.group(2)}


# ---------------------------------------------------------------- the Run's figure (pure views)

def test_the_run_names_a_faster_plain_decoder_and_its_rate():
    page = _compare([_decoder()])
    got = _fastest(page)
    assert got["data-fastest-plain"] == "llama.cpp" and got["data-fastest-plain-engine"] == "llamacpp"
    rate = float(got["data-fastest-plain-tps"])
    assert rate > _plain_tps() and f"<b>{rate:.0f}</b> tokens/s of wall time here" in got["text"]
    assert got["text"].startswith("llama.cpp decodes this pair plain at")
    assert "own plain decoding" in page   # the speedup still says over what it is


def test_no_sentence_without_a_faster_plain_decoder():
    assert "data-fastest-plain" not in _compare(())


def test_no_sentence_for_a_slower_one_the_same_engine_or_a_speculating_peer():
    slower = _decoder(tps=_plain_tps() / 2)
    same_engine = _decoder("the eager engine", "eager")          # the run's own engine, measured before
    speculating = _decoder(setting="mtp")                         # not a plain decoder
    assert "data-fastest-plain" not in _compare([slower, same_engine, speculating])
    both = _compare([slower, _decoder("the compiled engine", "compiled", tps=2 * _plain_tps(), clock="cpu"),
                     _decoder(tps=4 * _plain_tps())])
    assert _fastest(both)["data-fastest-plain"] == "llama.cpp"   # the fastest of those that qualify


def test_a_servers_name_is_escaped():
    page = _compare([_decoder(name=EVIL)])
    assert EVIL not in page and html.escape(EVIL) in page


# ---------------------------------------------------------------- Measure's result (pure views)

def _measurement(*beside, ar=100.0, spec=190.0) -> Measurement:
    return Measurement((1.8, 1.9, 2.0), spec, ar, 1, "cpu", tuple(beside), (), "eager engine")


def test_measure_names_the_fastest_plain_decoder_and_tables_every_decoder():
    m = _measurement(DecoderRow("the compiled engine", "compiled", "plain", 250.0, "cpu", True),
                     DecoderRow("llama.cpp", "llamacpp", "plain", 300.0, "wall", True),
                     DecoderRow("llama.cpp #1", "llamacpp", "mtp", 400.0, "wall", True))
    page = stats.measurement_html(m, Ran())
    assert _fastest(page)["data-fastest-plain"] == "llama.cpp" and "<b>300</b>" in page
    rows = re.findall(r'<tr data-decoder="([^"]*)"[^>]*data-setting="(\w+)" data-tps="([\d.]+)" '
                      r'data-over-fastest="([\d.]+)"( data-fastest)?>', page)
    assert [(r[0], r[1]) for r in rows] == [("this eager engine", "mtp"), ("this eager engine", "plain"),
                                          ("the compiled engine", "plain"), ("llama.cpp", "plain"),
                                          ("llama.cpp #1", "mtp")]
    assert [r[0] for r in rows if r[4]] == ["llama.cpp"]
    assert [float(r[3]) for r in rows] == pytest.approx([190 / 300, 100 / 300, 250 / 300, 1.0, 400 / 300], abs=1e-4)
    # the same rule as the bench's: the fastest of every plain rate measured
    assert m.fastest_plain == reduce.fastest({"eager engine": 100.0, "the compiled engine": 250.0,
                                              "llama.cpp": 300.0}) == {"decoder": "llama.cpp",
                                                                        "tokens_per_second": 300.0}


def test_measure_alone_or_fastest_itself_says_no_more():
    assert "measure-decoders" not in stats.measurement_html(_measurement(), Ran())
    slower = stats.measurement_html(_measurement(DecoderRow("llama.cpp", "llamacpp", "plain", 50.0, "wall", True)),
                                    Ran())
    assert "data-fastest-plain" not in slower and 'data-decoder="this eager engine"' in slower
    assert re.search(r'data-setting="plain" data-tps="100.000" data-over-fastest="1.0000" data-fastest>', slower)


def test_the_bench_and_measure_share_one_rule():
    plain = {"float32": dataclasses.replace(_plain_row(), tokens_per_second=90.0)}
    peers = [arms.PeerRow("llama.cpp plain", "llamacpp", "u", "plain", 120.0, None, None, None, True),
             arms.PeerRow("llama.cpp mtp", "llamacpp", "u", "mtp", 500.0, None, None, None, True)]
    assert arms.fastest(plain, peers) == {"decoder": "llama.cpp plain", "tokens_per_second": 120.0}


def _plain_row():
    from mtp_viz.measure.reduce import PlainRow
    fields = {f.name: None for f in dataclasses.fields(PlainRow)}
    return PlainRow(**fields)


def test_the_session_keeps_each_pairs_decoders_and_a_new_run_forgets_the_shown_ones():
    sess = runs.Session()
    key = ("tiny", None, "default")
    sess.remember(key, [_decoder(tps=100.0)])
    sess.remember(key, [_decoder(tps=120.0), _decoder("the compiled engine", "compiled", tps=90.0)])
    assert {d.name: d.tokens_per_second for d in sess.beside(key)} == {"llama.cpp": 120.0, "the compiled engine": 90.0}
    assert sess.beside(("other", None, "default")) == ()
    sess.faster = sess.beside(key)
    sess.new_run()   # a trace replayed next is no run of this pair
    assert sess.faster == ()


# ---------------------------------------------------------------- bad input

def _handlers(allow=OPEN, peers="") -> local.Handlers:
    def load(target, drafter, **kw):
        raise AssertionError("a refused Measure loads nothing")
    loader = service.PairLoader(load, allow=allow)
    return local.Handlers(loader, deploy.presets(loader.allow), ("tiny", None), cap=16, prompt_cap=64,
                          peers=beside.Peers(ServerPolicy(allow, ""), peers))


@pytest.mark.parametrize("peers, beside, sentence", [
    ("not a url", None, "That is not a server address"),
    ("ftp://127.0.0.1:21", None, "Only http:// and https:// server URLs are allowed."),
    ("http://user:pw@127.0.0.1:8080", None, "may not carry a user name or password"),
    (", ".join(f"http://127.0.0.1:{8080 + i}" for i in range(5)), None, "at most 4 peer servers"),
    (["http://127.0.0.1:8080"], None, "The peer servers must be a text"),
    ("", "warp", "Unknown engine 'warp'; choose one of: eager, compiled"),
    ("", True, "The engine measured beside must be a text, not True."),   # the checkbox it replaced
])
def test_bad_peers_are_one_sentence_before_anything_loads(peers, beside, sentence):
    status = statuses(_handlers().measuring.measure(values(), 3, None, beside, peers))
    assert len(status) == 1 and "mv-msg-error" in status[0] and sentence in html.unescape(status[0])


def test_a_locked_deployment_times_only_the_servers_it_lists():
    locked = deploy.AllowList("tiny")
    h = _handlers(locked, peers="http://127.0.0.1:8081")
    [refused] = statuses(h.measuring.measure(values(), 3, None, None, "http://10.0.0.5:8080"))
    assert "only connects to the vLLM servers it lists" in refused and "10.0.0.5" not in refused
    assert h.peers.default == "http://127.0.0.1:8081"
    assert h.peers.check("http://127.0.0.1:8081/v1/") == ["http://127.0.0.1:8081"]   # its own peers pass
    [no_compile] = statuses(h.measuring.measure(values(), 3, None, "compiled", ""))
    assert "does not offer the compiled engine" in no_compile


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def not_a_server():
    """A real HTTP server that is no inference server: every path is 404 HTML."""
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), http.server.SimpleHTTPRequestHandler)
    srv.RequestHandlerClass.log_message = lambda *a: None
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{srv.server_address[1]}/nowhere"
    srv.shutdown()
    srv.server_close()


def test_a_peer_not_there_or_no_server_is_left_out_in_one_sentence(not_a_server):
    gone = f"http://127.0.0.1:{_free_port()}"
    urls = [gone, not_a_server]
    peers, notes = beside.open_peers(urls, RunSettings("", max_new_tokens=8))
    assert peers == [] and len(notes) == 2
    assert notes[0].startswith("Measure left out peer 1: ") and notes[1].startswith("Measure left out peer 2: ")
    for note, url in zip(notes, urls):
        port = url.split(":")[2].split("/")[0]
        assert port not in note and "127.0.0.1" not in note and "nowhere" not in note and "HTTP" not in note
        assert note.count(". ") == 0 and note.endswith(".")   # one sentence


def test_server_errors_mid_measure_name_the_peer_by_its_place():
    from mtp_viz.sources.http import ServerError
    urls = ["http://127.0.0.1:9001", "http://127.0.0.1:9002"]
    said = beside.failure(urls, ServerError(urls[1], "{server} closed the connection while generating."))
    assert said == "Peer 2 closed the connection while generating."
    with pytest.raises(UserError):
        beside.Peers(ServerPolicy(OPEN, ""), "").check("http://")
