"""Where a checkpoint keeps its chat template: with its tokenizer, or (multimodal Gemma 4
checkpoints) with its processor, probed only where one can exist: a hub id, or a folder
with processor files. Read by :attr:`mtp_viz.sources.pair.ModelPair.chat_template`."""
from __future__ import annotations

from pathlib import Path

from .presets import is_local

PROCESSOR_FILES = ("processor_config.json", "preprocessor_config.json")


def processor_chat_template(spec: str) -> str | None:
    """The chat template of the processor saved at ``spec`` (a folder or a hub id); None
    where there is none."""
    where = spec
    if is_local(spec):
        folder = Path(spec).expanduser()
        if not any((folder / f).exists() for f in PROCESSOR_FILES):
            return None
        where = str(folder)
    from transformers import AutoProcessor
    try:
        return getattr(AutoProcessor.from_pretrained(where, trust_remote_code=False), "chat_template", None)
    except Exception:  # noqa: BLE001 - no processor simply means no chat template
        return None


__all__ = ["PROCESSOR_FILES", "processor_chat_template"]
