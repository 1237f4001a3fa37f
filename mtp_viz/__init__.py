"""mtp-viz: see speculative decoding with Gemma 4 MTP drafters happen, and measure it.

One event stream, many sources, many views::

    from mtp_viz import load_pair, LocalSource, RunSettings
    pair = load_pair("tiny")                          # a preset, a hub id or a folder
    for e in pair.generate("def main():", max_new_tokens=32, chat=False):
        print(e.type, getattr(e, "text", ""))
    for mode, e in LocalSource(pair).runs(RunSettings("def main():", chat=False)):
        ...                                           # both modes, taking turns

Nothing is imported eagerly: ``import mtp_viz`` loads no model and no torch; each name
below is imported from its layer on first use. This module names every layer, so it sits
above them all: no module of the package imports it (the version is
:mod:`mtp_viz.version`'s).
"""
from mtp_viz.version import __version__  # noqa: F401 - the package's version, re-exported

# public name -> the module that defines it
_PUBLIC = {
    "load_pair": "mtp_viz.sources.models",
    "from_models": "mtp_viz.sources.models",
    "ModelPair": "mtp_viz.sources.pair",
    "RunSettings": "mtp_viz.sources.settings",
    "Source": "mtp_viz.sources.base",
    "LocalSource": "mtp_viz.sources.local",
    "VllmSource": "mtp_viz.sources.vllm.source",
    "Servers": "mtp_viz.sources.servers",
    "TraceSource": "mtp_viz.sources.recorded",
    "record": "mtp_viz.sources.hf_generate",
    "open_source": "mtp_viz.sources",
    "show": "mtp_viz.notebook",
    "launch": "mtp_viz.app.start",
    "Sampling": "mtp_viz.engine.decoding",
    "UserError": "mtp_viz.errors",
    **{name: "mtp_viz.engine.events" for name in (
        "Event", "Start", "Drafted", "Accepted", "Rejected", "Bonus", "Token", "Step", "Done", "Error")},
}
__all__ = sorted(_PUBLIC)
# front ends a reader reaches through the package (``mtp_viz.notebook.embed_plotlyjs()``
# right after ``import mtp_viz``), imported on first use like the names above
_SUBMODULES = ("notebook",)


def __getattr__(name: str):
    import importlib
    if name in _SUBMODULES:
        return importlib.import_module(f"mtp_viz.{name}")
    if name not in _PUBLIC:
        raise AttributeError(f"module 'mtp_viz' has no attribute {name!r}")
    return getattr(importlib.import_module(_PUBLIC[name]), name)
