"""What the loop runs: one small interface for the eager and the compiled engine.

A :class:`Decoder` is the target as the loop sees it. ``open(need)`` gives a
:class:`RunCache`, one run's KV cache for ``need`` positions with the decoder that fills
it; the session's ``forward`` appends tokens and returns a :class:`Forward`, ``crop``
drops rejected entries, ``close`` hands the cache back. The loop never asks which
engine it has: :class:`EagerDecoder` wraps a transformers model and transformers'
``DynamicCache``; :class:`mtp_viz.engine.compiled.FastTarget` a static cache and compiled
graphs, and opens an eager session itself where no static capacity holds a run.

A drafter step (what the MTP drafter calls per draft) has the same split:
:class:`EagerDraftStep` runs the assistant as transformers does,
:class:`mtp_viz.engine.compiled.FastDraftStep` its compiled graph at fixed shapes.
Compare gpt-fast's ``model_forward`` / ``decode_one_token`` and vLLM's model runner:
the loop holds the decoding policy, the decoder the arithmetic.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

import torch

from .config import text_config
from .events import Ran


@dataclass
class Forward:
    """One target forward, reduced to what the loop needs."""
    logits: torch.Tensor                  # [keep, V] float32
    hidden: torch.Tensor | None           # [1, keep, H] last-layer activations (MTP only)
    shared_kv: dict | None                # layer type -> (K, V), ending with the new tokens
    compile_seconds: float = 0.0          # compiling its graph (compiled engine), off the clock


def with_state(model, keep: int, **inputs) -> tuple[torch.Tensor, torch.Tensor, dict | None]:
    """transformers' causal-LM forward written out (the base model, then the head over the
    last ``keep`` positions, 0: all), returning the last layer's state and the shared K/V
    beside the logits: (logits [1, keep, V], state [1, keep, H], shared K/V).

    What MTP reads of the target is its final state, not every layer's: asking transformers
    for ``output_hidden_states`` keeps all of them and, worse, stops Gemma 4 from running its
    KV-shared layers (the last 20 of E2B's 35 read K/V the earlier ones wrote) over the kept
    positions only, so a 2,048-token prefill for MTP cost about 4x the plain one. The head is
    the one ``Gemma4ForCausalLM`` and ``Gemma4ForConditionalGeneration`` apply: ``lm_head``,
    then the final soft cap, tanh(z / c)·c."""
    out = model.model(logits_to_keep=keep, return_shared_kv_states=True, **inputs)
    hidden = out.last_hidden_state
    if keep and hidden.shape[1] > keep:   # the model slices only where it could skip positions
        hidden = hidden[:, -keep:]
    logits = model.lm_head(hidden)
    if (cap := getattr(text_config(model.config), "final_logit_softcapping", None)) is not None:
        logits = torch.tanh(logits / cap) * cap
    return logits, hidden, getattr(out, "shared_kv_states", None)


class Decoder(Protocol):
    ran: Ran               # what a run's start event says ran; ``routing``: whether hooks on
    model: Any             # ``model`` (the eager transformers model) see its forwards

    def open(self, need: int) -> "RunCache": ...
    def forward(self, cache: Any, tokens: list[int], want_state: bool, keep: int,
                prefill: bool = False) -> Forward: ...
    def release(self, cache: Any) -> None: ...


@dataclass
class RunCache:
    """One run's cache and the decoder that fills it."""
    decoder: Decoder
    cache: Any

    @property
    def engine(self) -> str:
        return self.decoder.ran.engine

    def forward(self, tokens: list[int], want_state: bool, keep: int, prefill: bool = False) -> Forward:
        """The target over ``tokens`` appended to the cache; the last ``keep`` logits.
        ``prefill``: the prompt (the compiled engine sends it in chunks)."""
        return self.decoder.forward(self.cache, tokens, want_state, keep, prefill)

    def crop(self, drop: int) -> None:
        """Drop the last ``drop`` entries (the rejected drafts' KV). ``crop(0)`` is no
        no-op: transformers' sliding layers trim what the next forward no longer needs."""
        self.cache.crop(-drop)

    def close(self) -> None:
        self.decoder.release(self.cache)

    def __enter__(self) -> "RunCache":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class EagerDecoder:
    """A transformers model, called as transformers calls it, with its ``DynamicCache``."""
    ran = Ran("eager", "eager engine")

    def __init__(self, model):
        self.model = model
        self.device = model.device

    def open(self, need: int) -> RunCache:
        from transformers import DynamicCache
        cache = DynamicCache(config=self.model.config)
        cache.activate_past_recording()  # sliding-window layers can then be rolled back
        return RunCache(self, cache)

    @torch.inference_mode()
    def forward(self, cache, tokens: list[int], want_state: bool, keep: int, prefill: bool = False) -> Forward:
        ids = torch.tensor([tokens], device=self.device)
        if want_state:
            logits, hidden, shared = with_state(self.model, keep, input_ids=ids, cache=cache, use_cache=True)
            return Forward(logits[0, -keep:].float(), hidden[:, -keep:], shared)
        out = self.model(input_ids=ids, cache=cache, use_cache=True, logits_to_keep=keep)
        return Forward(out.logits[0, -keep:].float(), None, None)

    def release(self, cache) -> None:
        pass  # a DynamicCache is garbage once its run ends


def as_decoder(target) -> Decoder:
    """``target`` if it is a decoder already, else the eager decoder of a transformers model
    (what the Python API and the tests pass)."""
    return target if hasattr(target, "open") else EagerDecoder(target)


class EagerDraftStep:
    """The MTP assistant's forward for one draft, as transformers runs it: no padding at
    batch size 1, so no mask (the sliding window still applies)."""

    def __init__(self, assistant):
        self.assistant = assistant

    def inputs(self, shared_kv: dict | None, dtype) -> dict | None:
        return shared_kv  # one drafting step's K/V, as the target returned them

    def __call__(self, x, position, inputs) -> tuple[torch.Tensor, torch.Tensor, float]:
        """(logits [V], the next state [1, 1, H], compile seconds: none) for one draft."""
        out = self.assistant(inputs_embeds=x, position_ids=position, shared_kv_states=inputs, use_cache=False)
        return out.logits[0, -1], out.last_hidden_state, 0.0


@dataclass
class Mounted:
    """A loaded pair on an engine (:data:`mtp_viz.engine.engines.ENGINES`): what the loop
    runs and what getting there took."""
    decoder: Decoder              # the target as the loop runs it
    draft_step: Any = None        # the MTP assistant's step (None: the drafter's eager one)
    note: str = ""                # why it decodes eagerly instead (one sentence), or ""
    seconds: float = 0.0          # compiling its graphs so far, wall seconds, off every run's clock

    # What a run on it needs compiled is read here, never from the compiled engine's parts: a part that
    # compiles has ``graphs()`` (what it compiled, each graph's seconds) and a ``graph.note`` (why it fell back).
    @property
    def compiles(self) -> bool:
        """Whether its target runs compiled graphs: a run may need some compiled before its first token."""
        return hasattr(self.decoder, "graphs")

    def graphs(self) -> dict:
        """The graphs compiled so far (:class:`mtp_viz.engine.compiled.Graph`: its target's and its MTP drafter
        step's) and what compiling each took, wall seconds; none on an engine that compiles nothing."""
        return {g: t for part in (self.decoder, self.draft_step) if hasattr(part, "graphs")
                for g, t in part.graphs().items()}

    def fallback(self) -> tuple[str, ...]:
        """(target, drafter step): why each, compiled, decodes eagerly instead ("" while it does not)."""
        return tuple(getattr(getattr(part, "graph", None), "note", "") for part in (self.decoder, self.draft_step))

    def settled(self) -> "Mounted":
        """After a compile: itself; where its target could not compile, the eager engine; where only its drafter
        step could not, itself with the drafter's eager step: each with the sentence why (``note``)."""
        target, drafter = self.fallback()
        if target:
            return Mounted(EagerDecoder(self.decoder.model), note=target, seconds=self.seconds)
        if drafter:
            return Mounted(self.decoder, None, drafter, self.seconds)
        return self


def mount(target, assistant=None, mode: str | None = None) -> Mounted:
    """The eager engine: ``target`` as loaded, the MTP drafter's own eager step; nothing
    to compile (``mode`` is for engines that do)."""
    return Mounted(EagerDecoder(target))


__all__ = ["Decoder", "EagerDecoder", "EagerDraftStep", "Forward", "Mounted", "RunCache", "as_decoder", "mount",
           "with_state"]
