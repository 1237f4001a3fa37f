"""What the engine reads of a transformers config: a multimodal wrapper's text part
(Gemma 4's ``Gemma4Config.text_config``) or, for a text-only model, the config itself."""
from __future__ import annotations


def text_config(config):
    return config.get_text_config() if hasattr(config, "get_text_config") else config


__all__ = ["text_config"]
