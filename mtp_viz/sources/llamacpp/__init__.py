"""llama.cpp, the on-device engine, as a source and as a target for export:

- :mod:`.gguf` writes a Gemma 4 pair as GGUF files a stock llama.cpp loads (the target as
  ``gemma4``, its MTP assistant as ``gemma4-assistant``, for ``llama-server -m target.gguf
  -md drafter.gguf --spec-type draft-mtp``);
- :mod:`.client` and :mod:`.stream` read a running ``llama-server`` (recognised by its
  ``/props``), and :mod:`.source` is it as a :class:`~mtp_viz.sources.servers.ServerSource`.

Nothing here imports at package import time."""
