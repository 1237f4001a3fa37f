"""The engine's clock: waits and compiles kept off it, and no reading below zero even when
a compile's wall seconds exceed what the run's clock (the engine thread's CPU time) ran."""
from mtp_viz.engine.stopwatch import Stopwatch


class Ticks:
    """A clock the test moves by hand."""

    def __init__(self):
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_a_wait_and_a_compile_are_off_the_clock():
    clock = Ticks()
    watch = Stopwatch(clock)
    with watch.lap() as lap:
        clock.now += 5.0            # the call: 4 s compiling, 1 s decoding
        watch.compiled(4.0)
    with watch.held():
        clock.now += 30.0           # the user reading
    assert lap.seconds == 1.0 and watch.elapsed() == 1.0 and watch.compile_seconds == 4.0


def test_a_compile_longer_than_the_lap_ran_on_this_clock_never_goes_negative():
    """A cold compile: 17 s of wall time, most of it in compiler processes, while this
    thread's CPU clock ran 2 s: the lap reads 0, not -15 (as the app once showed)."""
    clock = Ticks()
    watch = Stopwatch(clock)
    with watch.lap() as first:
        clock.now += 0.5
    with watch.lap() as lap:
        clock.now += 2.0
        watch.compiled(17.0)
    assert first.seconds == 0.5 and lap.seconds == 0.0
    assert watch.elapsed() == 0.5 and watch.compile_seconds == 17.0
