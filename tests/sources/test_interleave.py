"""Turns on one thread, each source on its own clock (mtp_viz.sources.interleave): a source is
never charged for another's work, the one with the smallest share of its tokens goes next, and the real
engine's output does not depend on whether its runs take turns."""
from __future__ import annotations

import pytest

from factories import gemma_assistant, gemma_target, word_tokenizer
from mtp_viz.engine.events import Done, Start, Step, Token
from mtp_viz.sources.interleave import OwnClock, interleave


class Counter:
    """A time source that moves only when a source "works": the clocks' accounting is
    checked exactly, with no wall-clock time in the test."""

    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


def ticking(step_seconds: float, steps: int, counter: Counter):
    """A source whose every step takes ``step_seconds`` of work on ``counter``."""
    def source(clock):
        yield Start("autoregressive", 1, (1,))
        t0 = clock()
        for i in range(1, steps + 1):
            counter.t += step_seconds
            yield Step(i, 0, 0, 1, t=clock() - t0)
        yield Done(steps, steps, clock() - t0)
    return source


def test_each_source_is_timed_by_its_own_clock():
    """Each source works 0.12 s in all, 0.24 s together: each is charged exactly its own."""
    counter = Counter()
    out = list(interleave({"fast": ticking(0.004, 30, counter), "slow": ticking(0.012, 10, counter)},
                          now=counter))
    seconds = {k: e.seconds for k, e in out if isinstance(e, Done)}
    assert counter.t == pytest.approx(0.24)
    assert seconds == {"fast": pytest.approx(0.12), "slow": pytest.approx(0.12)}
    # and each step's time is its own work so far, whatever the other did in between
    for k, step in (("fast", 0.004), ("slow", 0.012)):
        assert [e.t for n, e in out if n == k and isinstance(e, Step)] == \
            pytest.approx([step * i for i in range(1, 31 if k == "fast" else 11)])


def producing(per_step: int, budget: int):
    """A source that emits ``per_step`` tokens a step up to its ``budget`` (no real work):
    the order of turns depends only on what the events say."""
    def source(clock):
        yield Start("autoregressive", 1, (1,), {"max_new_tokens": budget})
        made, step = 0, 0
        while made < budget:
            step += 1
            for _ in range(min(per_step, budget - made)):
                made += 1
                yield Token(step, made)
            yield Step(step, 0, 0, per_step)
        yield Done(made, step, 0.0)
    return source


def test_the_source_with_the_smallest_share_of_its_tokens_goes_next():
    """Both work through their outputs together, to the end: a mode that makes four
    tokens a step waits while the other catches up, instead of finishing first."""
    out = list(interleave({"spec": producing(4, 40), "ar": producing(1, 60)}))
    made, budget = {"spec": 0, "ar": 0}, {"spec": 40, "ar": 60}
    running = {"spec", "ar"}
    for k, e in out:
        share = {o: made[o] / budget[o] for o in made}
        # it went because its share was the smallest (or level, and it is named first)
        assert all(share[k] < share[o] or (share[k] == share[o] and k == "spec") for o in running - {k})
        if isinstance(e, Token):
            made[k] += 1
        elif isinstance(e, Done):
            running.discard(k)
        if running == {"spec", "ar"}:  # never more than one step apart
            assert abs(made["spec"] / 40 - made["ar"] / 60) <= 4 / 40
    assert made == budget
    done = [i for i, (k, e) in enumerate(out) if isinstance(e, Done)]
    assert len(out) - done[0] <= 2 * 6 + 2  # the fast one ends within one of its steps of the end


def test_own_clock_stands_still_while_suspended():
    counter = Counter()
    clock = OwnClock(counter)
    clock.resume()
    counter.t += 0.01
    clock.suspend()
    counter.t += 0.02
    assert clock() == pytest.approx(0.01)
    clock.resume()
    counter.t += 0.005
    assert clock() == pytest.approx(0.015)


def test_an_error_in_one_source_ends_all():
    def broken(clock):
        yield Start("speculative", 1, (1,))
        raise RuntimeError("boom")
    with pytest.raises(RuntimeError):
        list(interleave({"spec": broken, "ar": producing(1, 1000)}))


@pytest.fixture(scope="module")
def pair():
    from mtp_viz.sources.pair import ModelPair
    return ModelPair(gemma_target(layers=4), gemma_assistant(), word_tokenizer(), "random", "random", "cpu")


@pytest.mark.parametrize("sampling", [dict(), dict(temperature=0.9, seed=7)])
def test_the_engine_gives_the_same_tokens_in_turns(pair, sampling):
    """Runs taking turns share nothing: the same tokens as each run on its own, greedy
    and seeded sampling alike (the greedy runs also equal each other)."""
    prompt = " ".join(f"w{i}" for i in range(10, 30))
    kw = dict(max_new_tokens=40, draft_tokens=3, chat=False, **sampling)
    alone = {m: next(e for e in pair.generate(prompt, mode=m, **kw) if isinstance(e, Done)).generated_ids
             for m in ("speculative", "autoregressive")}
    turns = {k: e.generated_ids for k, e in interleave(
        {m: (lambda clock, m=m: pair.generate(prompt, mode=m, clock=clock, **kw))
         for m in ("speculative", "autoregressive")}) if isinstance(e, Done)}
    assert turns == alone and len(turns["speculative"]) == 40
    if not sampling:
        assert alone["speculative"] == alone["autoregressive"]


def test_on_a_cpu_with_one_thread_a_run_is_charged_its_threads_cpu_time(pair):
    """With one torch thread all of a run's work is on the generating thread, so the app
    times it on that thread's CPU clock and says so in ``Start.settings["clock"]``, which
    the compare badge labels; with torch's thread pool it is wall time."""
    import time

    import torch

    from mtp_viz.sources.interleave import own_clock
    from mtp_viz.sources.local import LocalSource
    from mtp_viz.sources.settings import RunSettings
    from mtp_viz.views import stats
    before = torch.get_num_threads()
    s = RunSettings("w10 w11 w12", max_new_tokens=6, draft_tokens=2, chat=False)
    try:
        for threads, now, basis in ((1, time.thread_time, "cpu"), (2, time.perf_counter, "wall")):
            torch.set_num_threads(threads)
            assert own_clock(pair.device) == (now, basis)
            events = list(LocalSource(pair).runs(s))
            assert {k: e.settings["clock"] for k, e in events if isinstance(e, Start)} == \
                {"speculative": basis, "autoregressive": basis}
            spec, ar = ([e for k, e in events if k == name] for name in ("speculative", "autoregressive"))
            h = stats.compare_html(stats.run_stats(spec), stats.run_stats(ar), greedy=True)
            assert f'data-clock="{basis}"' in h and ("tokens/s of engine CPU time" in h) == (basis == "cpu")
            assert ("of engine CPU time" in stats.stats_html(stats.run_stats(spec))) == (basis == "cpu")
    finally:
        torch.set_num_threads(before)
    # a plain call is on wall time, and an older trace (no "clock") reads as wall time
    assert next(iter(pair.generate("w10", max_new_tokens=1, chat=False))).settings["clock"] == "wall"
    assert stats.run_stats([Start("speculative", 1, (1,))]).clock == "wall"
