"""llama.cpp, the on-device engine: a Gemma 4 pair written as GGUF files that a stock
llama.cpp loads (:mod:`.gguf`: the target as ``gemma4``, its MTP assistant as
``gemma4-assistant``, for ``llama-server -m target.gguf -md drafter.gguf --spec-type
draft-mtp``). Nothing here imports at package import time."""
