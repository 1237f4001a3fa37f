"""The app's lines (runtime.turns): the engine's and the compiler's. First come, first
served, each waiting visitor knowing its place; a full line is one sentence; a place is
given back however its holder ends (done, Stop, a visitor who left)."""
from __future__ import annotations

import threading

import pytest

from mtp_viz.app.runtime import pairs, runs, service
from mtp_viz.app.runtime.pairs import PairSpec
from mtp_viz.app.runtime.turns import Turns, ahead_words
from mtp_viz.errors import UserError


def test_turns_are_taken_in_order_of_arrival_with_each_place_known():
    line = Turns(1)
    first, second, third = line.join(), line.join(), line.join()
    assert (first.holding, first.ahead, second.ahead, third.ahead) == (True, 0, 1, 2)
    assert not second.wait(0) and line.waiting == 2
    first.leave()
    assert second.wait(0) and (second.ahead, third.ahead) == (0, 1)
    third.leave()          # gives up its place while waiting (Stop, or a tab closed)
    second.leave()
    second.leave()         # twice does nothing
    assert line.waiting == 0 and line.join().holding


def test_two_at_once_and_a_full_line_is_one_sentence():
    line = Turns(2, max_waiting=1, full="The line is full.")
    a, b, c = line.join(), line.join(), line.join()
    assert a.holding and b.holding and not c.holding and c.ahead == 2
    with pytest.raises(UserError, match="^The line is full.$"):
        line.join()
    a.leave()
    assert c.wait(0)
    assert ahead_words(1, "run") == "1 run ahead" and ahead_words(3, "compile") == "3 compiles ahead"


def test_a_waiter_wakes_when_the_holder_leaves():
    line = Turns(1)
    holder, got = line.join(), threading.Event()
    waiter = line.join()
    t = threading.Thread(target=lambda: waiter.wait() and got.set())
    t.start()
    assert not got.wait(0.1)
    holder.leave()
    t.join(10)
    assert got.is_set()


def test_one_compile_at_a_time_its_place_shown_and_a_full_line_refused(monkeypatch):
    """The loader's compiler line: compiles (pairs asked compiled) run one at a time,
    each queued one knows how many are ahead, and past MTP_VIZ_COMPILE_QUEUE waiting a new
    one is one sentence; an eager load never waits in it."""
    monkeypatch.setenv("MTP_VIZ_COMPILE_QUEUE", "1")
    gates, entered = {}, {}

    def load(target, drafter, precision=None, engine=None, progress=None):
        key = (target, engine == "compiled")
        entered[key].set()
        gates[key].wait(30)
        return object()

    for key in [("a", True), ("b", True), ("c", True), ("e", False)]:
        gates[key], entered[key] = threading.Event(), threading.Event()
    loader = service.PairLoader(load, max_pairs=8)
    monkeypatch.setattr(pairs, "pair_key", lambda t, d: (t, d))
    compiled = {name: PairSpec(name, engine="compiled") for name in "abc"}
    loader.start(compiled["a"])
    assert entered["a", True].wait(10)
    loader.start(compiled["b"])
    st = loader.state(compiled["b"])
    assert st.status == service.Load.QUEUED and st.ahead == 1
    with pytest.raises(UserError, match="compiles are already running or waiting"):
        loader.start(compiled["c"])
    loader.start(PairSpec("e"))                   # an eager load: not in the compiler's line
    assert entered["e", False].wait(10)
    gates["e", False].set()
    gates["a", True].set()
    assert entered["b", True].wait(10)            # b's turn once a is done
    assert loader.state(compiled["b"]).ahead == 0
    gates["b", True].set()
    assert loader.wait(compiled["b"], timeout=10).status == service.Load.READY


def test_a_run_waiting_for_the_engine_shows_its_place_and_leaves_on_stop():
    """Handlers' engine line: the second run waits with its place shown; Stop takes it out
    of the line, and the place is free again."""
    from mtp_viz.app.handlers.local import Handlers
    h = Handlers(service.PairLoader(lambda t, d: object()), {}, ("tiny", None), 64, 512, empty_figures={})
    held = h.engine.join()
    sess = runs.Session()
    waits = h.gate.turn(sess)
    line = next(waits).status
    assert "Waiting for the engine: 1 run ahead" in line
    sess.stop.set()
    with pytest.raises(UserError, match="Stopped while waiting for the engine"):
        next(waits)
    assert h.engine.waiting == 0
    held.leave()
    with pytest.raises(StopIteration) as turned:   # no wait: the turn is returned at once
        next(h.gate.turn(runs.Session()))
    ticket = turned.value.value
    assert ticket.holding
    ticket.leave()
