"""A llama.cpp server as a source (:class:`~mtp_viz.sources.servers.ServerSource`): its
streamed ``/completion``, with the steps rebuilt from its running draft counts
(:mod:`.stream`)."""
from __future__ import annotations

import threading
from typing import Iterator

from mtp_viz.engine.events import Event

from ..prometheus import SpecDecodeCounters
from ..servers import ServerSource
from ..settings import RunSettings
from . import client, stream


class LlamaCppSource(ServerSource):
    software = "llama.cpp"
    noun = "A llama.cpp server"

    @staticmethod
    def counters(url: str) -> SpecDecodeCounters:
        return client.scrape(url)

    @staticmethod
    def speculates(url: str) -> bool:
        return client.slots(url).speculative

    @staticmethod
    def version(url: str) -> str | None:
        """``/props``'s ``build_info`` (llama.cpp's build number and commit), clipped."""
        return client.build_info(url)

    @staticmethod
    def model_shape(url: str, stop=None) -> tuple[int, int] | None:
        """``/v1/models``' ``n_vocab`` and ``n_embd``."""
        return client.model_shape(url, stop)

    def stream(self, url: str, model: str | None, mode: str, s: RunSettings,
               stop: threading.Event | None) -> Iterator[Event]:
        return stream.events(url, s.prompt, mode=mode, chat=s.chat, max_new_tokens=s.max_new_tokens,
                             temperature=s.sampling.temperature, top_p=s.sampling.top_p, top_k=s.sampling.top_k,
                             seed=s.sampling.seed, stop=stop)


__all__ = ["LlamaCppSource"]
