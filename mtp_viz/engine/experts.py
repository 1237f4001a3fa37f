"""Experts touched: which experts a mixture-of-experts target routes each forward to.

In Gemma 4's mixture-of-experts models (the 26B-A4B: ``enable_moe_block`` in the text
config) every decoder layer keeps a dense MLP and adds ``num_experts`` experts of width
``moe_intermediate_size``. Its router (transformers' ``Gemma4TextRouter``, the layer's
``router`` module) takes the layer's input flattened to [tokens, hidden] and returns
``(router_probabilities, top_k_weights, top_k_index)``; ``top_k_index`` [tokens, top_k]
names the ``top_k_experts`` experts each token goes to (distinct within a token).

One plain decoding step sends one token, so each layer loads exactly top_k experts. A
verification sends γ + 1 tokens, which may go to up to min(num_experts, top_k·(γ + 1))
distinct experts: the expert weights a verification reads beyond a plain step's are the
mixture-of-experts caveat of Google's guide, and this module counts them.

:class:`ExpertTap` puts a forward hook on every router of the target's language model
and, for the forwards the engine arms it around, counts per layer the distinct experts
that forward's tokens were sent to. The engine builds one only when a run asks
(``experts=True``); without it no hook is registered and nothing is counted.
"""
from __future__ import annotations

import threading
import weakref
from typing import Any

from .config import text_config

__all__ = ["ExpertTap", "NO_TAP", "moe_shape", "routers"]


def routers(target: Any) -> list:
    """The target's routers (``Gemma4TextRouter``), one per mixture-of-experts layer, in
    layer order; [] for a dense target. Only the language model's: towers are left out."""
    from transformers.models.gemma4.modeling_gemma4 import Gemma4TextRouter
    decoder = target.get_decoder() if hasattr(target, "get_decoder") else target
    return [m for m in decoder.modules() if isinstance(m, Gemma4TextRouter)]


def moe_shape(target: Any) -> dict[str, int]:
    """``{"layers", "num_experts", "top_k"}`` of a mixture-of-experts target, {} for a
    dense one, read from its config (every layer of a Gemma 4 MoE model has a router)."""
    cfg = text_config(target.config)
    if not getattr(cfg, "enable_moe_block", False):
        return {}
    return {"layers": int(cfg.num_hidden_layers), "num_experts": int(cfg.num_experts),
            "top_k": int(cfg.top_k_experts)}


class ExpertTap:
    """Counts, per mixture-of-experts layer, the distinct experts of armed forwards.

    ``arm()`` before a target forward, ``take()`` after it: the per-layer counts of that
    forward, in layer order. Only forwards armed on the calling thread are kept (a model
    may serve several runs: two runs taking turns on one thread never interleave inside
    a forward, and each tap keeps only its own). The hooks go when this tap does."""

    def __init__(self, target: Any):
        found = routers(target)
        if not found:
            raise ValueError("The target has no mixture-of-experts router to count.")
        self.layers = len(found)
        armed: dict[int, dict[int, Any]] = {}  # thread -> layer -> that forward's top_k_index
        self._armed = armed

        def hook(layer: int):
            def keep(module, args, out):
                seen = armed.get(threading.get_ident())
                if seen is not None:
                    seen[layer] = out[2]  # (router_probabilities, top_k_weights, top_k_index)
            return keep

        # the hooks hold only ``armed``, never the tap, so the tap (and its hooks) can go
        handles = [r.register_forward_hook(hook(i)) for i, r in enumerate(found)]
        weakref.finalize(self, lambda: [h.remove() for h in handles])

    def arm(self) -> None:
        self._armed[threading.get_ident()] = {}

    def take(self) -> tuple[int, ...]:
        """The armed forward's distinct experts per layer (one whole number each)."""
        seen = self._armed.pop(threading.get_ident())
        assert len(seen) == self.layers, "every mixture-of-experts layer routes every forward"
        return tuple(int(seen[i].unique().numel()) for i in range(self.layers))


class _NoTap:
    """What the engine uses when nothing is counted: no hooks, empty counts."""
    layers = 0

    def arm(self) -> None:
        pass

    def take(self) -> tuple[int, ...]:
        return ()


NO_TAP = _NoTap()
