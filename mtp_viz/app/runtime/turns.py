"""Taking turns, in order of arrival, with a visible place in line.

The app has two such lines: the local engine's (``MTP_VIZ_CONCURRENCY`` runs at once, so
timings never share the CPU; Run, Measure and ``/generate`` join it only once their pair
is ready, so a load or a compile never holds it) and the compiler's (one compile at a
time app-wide, at most ``MTP_VIZ_COMPILE_QUEUE`` waiting; see :class:`.service.PairLoader`).
"""
from __future__ import annotations

import threading

from mtp_viz.errors import UserError


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


def ahead_words(n: int, what: str) -> str:
    """"1 run ahead" / "3 compiles ahead"."""
    return f"{n} {what}{'' if n == 1 else 's'} ahead"


__all__ = ["Ticket", "Turns", "ahead_words"]
