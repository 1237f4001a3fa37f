"""A vLLM server as a source (:class:`~mtp_viz.sources.servers.ServerSource`): its
OpenAI-compatible stream with per-request speculative decoding metrics, read by
:func:`.stream.events`."""
from __future__ import annotations

import threading
from typing import Iterator

from mtp_viz.engine.events import Event
from mtp_viz.errors import clip

from ..prometheus import SpecDecodeCounters
from ..servers import ServerSource
from ..settings import RunSettings
from . import client, stream


class VllmSource(ServerSource):
    software = "vLLM"
    noun = "A vLLM server"

    @staticmethod
    def counters(url: str) -> SpecDecodeCounters:
        return client.scrape(url)

    @staticmethod
    def speculates(url: str) -> bool:
        client.served_models(url)   # one sentence if it is not vLLM
        return client.scrape(url).enabled

    @staticmethod
    def version(url: str) -> str | None:
        """``/version``'s ``version`` (vLLM's own release), clipped."""
        v = client.get_json(url, "/version")
        return clip(v["version"], 80) if isinstance(v, dict) and isinstance(v.get("version"), str) else None

    def stream(self, url: str, model: str | None, mode: str, s: RunSettings,
               stop: threading.Event | None) -> Iterator[Event]:
        return stream.events(url, s.prompt, model=model, mode=mode, chat=s.chat,
                             max_new_tokens=s.max_new_tokens, temperature=s.sampling.temperature,
                             top_p=s.sampling.top_p, top_k=s.sampling.top_k, seed=s.sampling.seed, stop=stop)


__all__ = ["VllmSource"]
