"""Taking turns, in order of arrival, with a visible place in line.

The app has two such lines: the local engine's (``MTP_VIZ_CONCURRENCY`` runs at once, so
timings never share the CPU; Run, Measure and ``/generate`` join it only once their pair
is ready, so a load or a compile never holds it) and the compiler's (one compile at a
time app-wide, at most ``MTP_VIZ_COMPILE_QUEUE`` waiting; see :class:`.service.PairLoader`).
"""
from __future__ import annotations

import threading

from mtp_viz.errors import UserError

WAIT_STEP = 0.25   # seconds between looks at the stop switch while waiting for a turn again (Held)


class Ticket:
    """One place in a :class:`Turns` line: wait for the turn, then leave (always)."""

    def __init__(self, line: "Turns"):
        self._line = line
        self.holding = False

    @property
    def ahead(self) -> int:
        """Holders and earlier arrivals still before this ticket (0 once it holds a turn)."""
        return self._line._ahead(self)

    def wait(self, timeout: float | None = None) -> bool:
        """Block until this ticket holds a turn (True) or ``timeout`` seconds pass (False)."""
        return self._line._wait(self, timeout)

    def leave(self) -> None:
        """Give the turn back, or the place in line; a second call does nothing."""
        self._line._leave(self)


class Turns:
    """At most ``size`` tickets hold a turn at once; the others wait first come, first
    served. ``max_waiting``: how many may wait at most (None: any number); past that,
    :meth:`join` is ``full``'s sentence."""

    def __init__(self, size: int = 1, max_waiting: int | None = None, full: str = "The line is full; try again soon."):
        self.size, self.max_waiting, self.full = max(1, size), max_waiting, full
        self._cond = threading.Condition()
        self._line: list[Ticket] = []     # holders first, then the waiting, in order of arrival

    def join(self) -> Ticket:
        with self._cond:
            if self.max_waiting is not None and len(self._line) - self.size >= self.max_waiting:
                raise UserError(self.full)
            ticket = Ticket(self)
            self._line.append(ticket)
            self._promote()
            return ticket

    @property
    def waiting(self) -> int:
        with self._cond:
            return sum(not t.holding for t in self._line)

    def _promote(self) -> None:
        for t in self._line[:self.size]:
            t.holding = True
        self._cond.notify_all()

    def _ahead(self, ticket: Ticket) -> int:
        with self._cond:
            return 0 if ticket.holding or ticket not in self._line else self._line.index(ticket)

    def _wait(self, ticket: Ticket, timeout: float | None) -> bool:
        with self._cond:
            return self._cond.wait_for(lambda: ticket.holding, timeout)

    def _leave(self, ticket: Ticket) -> None:
        with self._cond:
            if ticket in self._line:
                self._line.remove(ticket)
            ticket.holding = False
            self._promote()


class Held:
    """A turn a long job holds only while it needs it: Measure holds the engine's turn for
    the pair's own timed runs and gives it back while a peer server runs (a guest's run
    uses no local engine), so a slow or stalled peer holds no other visitor's Run. Taking
    it again joins the line anew, checking ``stop`` as it waits (:data:`WAIT_STEP`);
    :meth:`leave` (always, at the end) gives back whichever place it holds."""

    def __init__(self, line: Turns, ticket: Ticket, stop: threading.Event | None = None,
                 stopped: str = "Stopped while waiting for the engine."):
        self.line, self.ticket, self.stop, self.stopped = line, ticket, stop, stopped

    @property
    def holding(self) -> bool:
        return self.ticket.holding

    def take(self) -> None:
        """Hold the turn (at once if held, else after those ahead); ``stopped`` when stopped."""
        if self.ticket.holding:
            return
        self.ticket.leave()
        self.ticket = self.line.join()
        while not self.ticket.wait(WAIT_STEP):
            if self.stop is not None and self.stop.is_set():
                self.ticket.leave()
                raise UserError(self.stopped)

    def give(self) -> None:
        """Give the turn back to the line until :meth:`take`."""
        self.ticket.leave()

    leave = give


def ahead_words(n: int, what: str) -> str:
    """"1 run ahead" / "3 compiles ahead"."""
    return f"{n} {what}{'' if n == 1 else 's'} ahead"


__all__ = ["Held", "Ticket", "Turns", "ahead_words"]
