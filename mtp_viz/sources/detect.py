"""A server whose kind is read from what it answers: a llama.cpp server answers
``/props`` (:func:`.llamacpp.client.recognise`); any other is read as vLLM, whose own
checks say in one sentence when it is not one. The answer is asked once, when the
first run starts (so a server that is down fails inside the run, as an ``error``), and
kept. The baseline is read as the same kind as the speculating server."""
from __future__ import annotations

import importlib
import threading
from typing import Iterator

from mtp_viz.engine.events import Event

from .http import public
from .servers import ServerSource
from .settings import RunSettings

# The server kinds, asked in order: (a function that recognises one from what ``url``
# answers, its source class), as "module:name" imported on first use; the last, with no
# test, is what any other server is read as. A new kind of server is one entry here.
KINDS = (
    ("mtp_viz.sources.llamacpp.client:recognise", "mtp_viz.sources.llamacpp.source:LlamaCppSource"),
    (None, "mtp_viz.sources.vllm.source:VllmSource"),
)


def _load(path: str):
    module, name = path.split(":")
    return getattr(importlib.import_module(module), name)


def kind_of(url: str, stop=None) -> type[ServerSource]:
    """The source class of the server at ``url`` (``stop``: ends the wait, :class:`~.http.Stopped`)."""
    for test, source in KINDS:
        if test is None or _load(test)(url, stop):
            return _load(source)
    raise AssertionError("the last kind takes any server")


class DetectedServer(ServerSource):
    software = "vLLM or llama.cpp"
    noun = "A server"

    def __init__(self, servers, sentence=None):
        super().__init__(servers, sentence)
        self.name = f"the server at {public(servers.spec)}"
        self._kind: type[ServerSource] | None = None
        self._asking = threading.Lock()   # concurrent runs (a traffic sweep's clients) ask once

    def kind(self, stop=None) -> type[ServerSource]:
        with self._asking:
            if self._kind is None:
                self._kind = kind_of(self.servers.spec, stop)
            return self._kind

    def counters(self, url: str):  # type: ignore[override]  # the kind's, for this server
        return self.kind().counters(url)

    def speculates(self, url: str) -> bool:  # type: ignore[override]
        return self.kind().speculates(url)

    def version(self, url: str) -> str | None:  # type: ignore[override]
        return self.kind().version(url)

    def model_shape(self, url: str, stop=None) -> tuple[int, int] | None:  # type: ignore[override]
        return self.kind(stop).model_shape(url, stop)

    @property
    def label(self) -> str:
        """What answers, once asked ("vLLM", "llama.cpp")."""
        return self.kind().software

    def stream(self, url: str, model: str | None, mode: str, s: RunSettings,
               stop: threading.Event | None) -> Iterator[Event]:
        return self.kind(stop).stream(self, url, model, mode, s, stop)


__all__ = ["DetectedServer", "kind_of"]
