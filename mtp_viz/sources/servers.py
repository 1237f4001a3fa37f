"""An inference server as a source: the speculating server for the speculative run, a
baseline server (the same model without speculation) for the autoregressive one.

The runs go one after the other, not in turns: a server's timings are the arrival
times of its own stream, which must be read as it comes. The baseline starts only if
the speculating run ended well. The drafter, draft length and schedule are the
server's own, fixed when it started; a stop closes the connection. Each server kind
(:mod:`.vllm.source`, :mod:`.llamacpp.source`) says how one prompt becomes its events;
:func:`mtp_viz.sources.open_server` tells the kinds apart by what a server answers.

A server's failure is a :class:`~.http.ServerError`: the CLI prints its operator's
sentence; the app builds the source with ``sentence=`` (:func:`by_role` or
:meth:`ServerError.visitor`), so a visitor's sentence holds no HTTP status and no path.
"""
from __future__ import annotations

import threading
from abc import abstractmethod
from dataclasses import dataclass
from typing import Callable, Iterator

from mtp_viz.engine.events import Error, Event
from mtp_viz.errors import UserError

from .base import Capabilities, Pause, Source
from .http import ServerError, Stopped, public
from .settings import RunSettings


@dataclass(frozen=True)
class Servers:
    """Where the source's runs go (URLs already checked by whoever built it)."""
    spec: str                          # speculates (and reports its steps)
    baseline: str | None = None        # the same model without speculation
    model: str | None = None           # the served model's name (default: the server's first)
    baseline_model: str | None = None


def by_role(servers: Servers) -> Callable[[ServerError], str]:
    """A server's failure as a visitor's sentence that names the server by its role
    ("the speculating server", "the baseline server"), never by its address: no HTTP
    status, no path, no port."""
    def sentence(e: ServerError) -> str:
        role = ("the speculating server" if e.url == servers.spec else
                "the baseline server" if e.url == servers.baseline else "a server")
        return e.visitor(role, f"{role}'s address")
    return sentence


class ServerSource(Source):
    """A server kind's source; a subclass names itself (``software``, ``noun``) and
    says how one prompt becomes events (:meth:`stream`)."""
    # not pausable: a server decides its steps itself; it takes text and tokenizes it
    capabilities = Capabilities(remote=True, token_prompt=False)
    software = "a server"

    def __init__(self, servers: Servers, sentence: Callable[[ServerError], str] | None = None):
        """``sentence``: how a server's failure is told (default: the operator's sentence,
        ``str(error)``); the app passes a visitor's (:func:`by_role`, ``ServerError.visitor``)."""
        self.servers, self.sentence = servers, sentence
        self.name = f"the {self.software} server at {public(servers.spec)}"

    @staticmethod
    @abstractmethod
    def counters(url: str):
        """The server's cumulative speculative decoding counters (its ``/metrics``:
        :class:`mtp_viz.sources.prometheus.SpecDecodeCounters`)."""

    @staticmethod
    @abstractmethod
    def speculates(url: str) -> bool:
        """Whether the server at ``url`` speculates (one sentence if it is not this kind)."""

    @staticmethod
    def version(url: str) -> str | None:
        """The version the server at ``url`` reports of itself (None where it says none),
        for a study's record of which software answered."""
        return None

    @staticmethod
    def model_shape(url: str, stop=None) -> tuple[int, int] | None:
        """(vocabulary, width) of the model the server says it serves; None where it says
        nothing checkable (vLLM names its model by the path it was started with)."""
        return None

    @abstractmethod
    def stream(self, url: str, model: str | None, mode: str, s: RunSettings,
               stop: threading.Event | None) -> Iterator[Event]:
        """One prompt's run on the server at ``url``, as events."""

    def runs(self, s: RunSettings, stop: threading.Event | None = None,
             pause: Pause | None = None) -> Iterator[tuple[str, Event]]:
        try:
            yield from self._runs(self.check(s), stop)
        except Stopped:   # stopped while it waited on a server: the run ends there
            return
        except ServerError as e:
            if self.sentence is None:
                raise
            raise UserError(self.sentence(e)) from None

    def _runs(self, s: RunSettings, stop: threading.Event | None) -> Iterator[tuple[str, Event]]:
        for mode in s.modes:
            url, model = ((self.servers.spec, self.servers.model) if mode == "speculative" else
                          (self.servers.baseline, self.servers.baseline_model))
            if url is None:
                raise UserError("The autoregressive baseline needs a baseline server.")
            if stop is not None and stop.is_set():
                return
            failed = False
            for e in self.stream(url, model, mode, s, stop):
                failed = failed or isinstance(e, Error)
                yield mode, e
            if failed:
                return


__all__ = ["ServerSource", "Servers", "by_role"]
