"""Drafters: who proposes the tokens the target verifies.

A drafter is a small protocol (see :class:`Drafter`): ``reset`` before a generation,
``propose`` up to k tokens given the verified context, ``rollback`` once the target
has decided how many were kept. Three are built in:

- :class:`MTPDrafter`: Gemma 4's multi-token-prediction assistant. It has no KV cache
  and no embedding of its own. For every drafted token it reads
  ``concat(target_embedding(last token), h)`` where h is the target's last-layer
  activation for the first draft and its own (projected) output state after that, sits
  at one constant position (the last verified one), and cross-attends to the target's
  shared KV states covering the verified context.
- :class:`ModelDrafter`: an independent small causal LM that shares the tokenizer,
  with its own KV cache cropped on rejection.
- :class:`PromptLookupDrafter`: n-gram lookup in the context, no second model; its
  drafts are certain (q = one-hot), so acceptance reduces to p(x).
"""
from __future__ import annotations

import importlib
from dataclasses import dataclass


@dataclass(frozen=True)
class DrafterEntry:
    """A drafter in the registry, readable without importing torch."""
    label: str        # how the page names it
    path: str         # "module:Class", imported on first use (drafters import torch)
    needs: str        # the loaded model it drafts with: "assistant", "model", or "" for none
    missing: str      # the sentence when that model is not loaded ({target}: the pair's name)


# name -> entry: the one table the engine, the CLI, links and the UI read. A new drafter
# is a module of this package with a class that has the protocol of .base.Drafter and a
# ``build(target, draft_model, step=None)`` class method (``step``: the compiled engine's
# forward of the loaded draft model, engine.compiled.FastDraftStep; None: eager; a drafter
# that runs no draft model ignores it), and one entry here.
DRAFTERS: dict[str, DrafterEntry] = {
    "mtp": DrafterEntry("MTP assistant", "mtp_viz.engine.drafters.mtp:MTPDrafter", "assistant",
                        "{target} has no Gemma 4 MTP drafter loaded; choose prompt lookup or load an assistant."),
    "model": DrafterEntry("Draft model", "mtp_viz.engine.drafters.model:ModelDrafter", "model",
                          "An independent draft model is needed for the 'model' drafter."),
    "lookup": DrafterEntry("Prompt lookup", "mtp_viz.engine.drafters.lookup:PromptLookupDrafter", "", ""),
}


def drafter_class(name: str) -> type:
    """The class registered under ``name`` (imports its module)."""
    module, cls = DRAFTERS[name].path.split(":")
    return getattr(importlib.import_module(module), cls)


__all__ = ["DRAFTERS", "DrafterEntry", "drafter_class"]
