"""Sources: everything that turns a run's settings into an event stream.

:class:`~mtp_viz.sources.base.Source` is the protocol; :func:`open_source` builds the
source a command line or a script names (a local model pair, or a vLLM or llama.cpp server), so no
front end has to switch on the kind. The app builds its sources from the page's picker.
Nothing is imported eagerly: importing this package loads no torch.
"""
from __future__ import annotations


def open_source(target: str | None = "tiny", drafter: str | None = None, *, server: str | None = None,
                baseline_server: str | None = None, model: str | None = None,
                baseline_model: str | None = None, drafter_kind: str = "auto",
                device: str | None = None, dtype: str | None = None, target_precision: str | None = None,
                drafter_precision: str | None = None, weights: str = "real",
                engine: str | None = None):
    """A server's source when ``server`` is given (:func:`open_server`) (its baseline, for the
    autoregressive run, is ``baseline_server`` or the same server), else the local
    engine on the pair :func:`mtp_viz.sources.models.load_pair` loads (each model in its
    precision: ``dtype`` for both, ``target_precision`` / ``drafter_precision`` for one;
    ``engine``: a name of :data:`mtp_viz.engine.engines.ENGINES`, :meth:`mtp_viz.sources.pair.ModelPair.use`;
    ``weights="random"``: the target's real shape with random weights, :mod:`.shapes`)."""
    if server:
        from .servers import Servers
        return open_server(Servers(server, baseline_server or server, model, baseline_model or model))
    from .local import LocalSource
    from .models import load_pair
    return LocalSource(load_pair(target, drafter, drafter_kind=drafter_kind, device=device, dtype=dtype,
                                 target_precision=target_precision, drafter_precision=drafter_precision,
                                 weights=weights, engine=engine))


def open_server(servers, sentence=None):
    """The source for ``servers`` (a :class:`~.servers.Servers`): vLLM or llama.cpp, told
    apart by what the speculating server answers when the first run starts
    (:class:`~.detect.DetectedServer`). ``sentence``: how a failure is told (the app's)."""
    from .detect import DetectedServer
    return DetectedServer(servers, sentence)
