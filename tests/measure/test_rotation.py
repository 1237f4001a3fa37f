"""One rotation for the bench and Measure (measure.session.rotated), and one arm protocol."""
import inspect

from mtp_viz.measure import compare, peers, session


def test_each_task_goes_first_once_in_as_many_turns_and_keeps_its_neighbours():
    todo = ["spec", "plain", "compiled", "llama.cpp"]
    turns = [session.rotated(todo, t) for t in range(len(todo))]
    assert sorted(t[0] for t in turns) == sorted(todo)
    for t in turns:   # a rotation, not a shuffle: the cyclic order is kept
        i = todo.index(t[0])
        assert t == todo[i:] + todo[:i]
    assert session.rotated(todo, len(todo) + 1) == turns[1]


def test_the_bench_and_measure_rotate_through_the_same_function_and_peers_pretend_nothing():
    assert "rotated(" in inspect.getsource(compare._Rounds.timed)   # Measure's timed rounds
    assert "rotated(" in inspect.getsource(session.interleaved)
    for name in ("baseline", "several_engines", "has_reference", "exact", "runner"):
        assert not hasattr(peers.PeerArm, name), name
    assert "PEER" not in inspect.getsource(session)   # the session does not ask what an arm is
