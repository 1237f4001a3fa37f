"""The anatomy of a loaded pair's Gemma 4 MTP drafter, read from its real modules.

:func:`anatomy` returns a plain :class:`Anatomy` (no tensors), which the app draws
(:mod:`mtp_viz.views.anatomy`). Every number comes from the loaded weights' shapes
and configs, never from a description of the published checkpoints:

    x_1 = concat(E[last token], h_target)            E: the target's input embedding
    s_j = layers(pre_projection(x_j), shared KV)     one constant position, no cache
    logits_j = head(s_j)                             full softmax, or clustered
    x_{j+1} = concat(E[draft j], post_projection(s_j))

The drafter's attention layers hold no K/V projection of their own: each reads the
K/V that the target's last layer of the same attention type stored in its forward
(``shared_kv_states``), so the drafter keeps no cache between drafts or steps.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from mtp_viz.engine.config import text_config

__all__ = ["Anatomy", "DrafterLayer", "ClusteredHead", "Experts", "anatomy"]


@dataclass(frozen=True)
class DrafterLayer:
    index: int                 # 1-based, in the drafter
    attention: str             # "full_attention" or "sliding_attention"
    query_heads: int
    reads_target_layer: int    # 1-based: the target layer whose K/V it attends to
    kv_heads: int              # of that target layer
    head_dim: int
    sliding_window: int = 0    # tokens, for sliding attention


@dataclass(frozen=True)
class ClusteredHead:
    """Gemma 4 E2B/E4B's ordered-embedding head."""
    centroids: int             # clusters the vocabulary is split into
    top_clusters: int          # clusters scored per draft (centroid_intermediate_top_k)
    tokens_per_cluster: int

    @property
    def candidates(self) -> int:
        """Tokens that get a real logit per draft; all others share one floor logit."""
        return self.top_clusters * self.tokens_per_cluster


@dataclass(frozen=True)
class Experts:
    """A mixture-of-experts target (the 26B-A4B): each of its ``layers`` keeps a dense
    MLP of width ``mlp_width`` and adds ``num_experts`` experts of width ``expert_width``,
    of which its router sends every token to ``top_k``."""
    layers: int
    num_experts: int
    top_k: int
    expert_width: int
    mlp_width: int

    @property
    def active_width(self) -> int:
        """The MLP width one token uses per layer: the dense MLP and its top_k experts."""
        return self.mlp_width + self.top_k * self.expert_width


@dataclass(frozen=True)
class Anatomy:
    target: str                        # the pair's names, as the user gave them (a folder by its own name)
    drafter: str
    kind: str                          # "mtp", "model" (independent draft model) or "none"
    target_layers: int = 0
    target_width: int = 0              # the target's hidden size (= its embedding width)
    vocab: int = 0
    target_params: int = 0
    drafter_params: int = 0
    drafter_width: int = 0
    drafter_layers: int = 0
    input_width: int = 0               # concat(embedding, hidden): pre_projection's input
    projected_width: int = 0           # pre_projection's output = the drafter's width
    state_width: int = 0               # post_projection's output, fed to the next draft
    layers: tuple[DrafterLayer, ...] = field(default_factory=tuple)
    clustered: ClusteredHead | None = None
    experts: Experts | None = None     # the target's mixture of experts; None when dense
    target_precision: str = ""         # what each model runs in (ModelPair.precision)
    drafter_precision: str = ""


def _params(model) -> int:
    return sum(p.numel() for p in model.parameters())


def _producers(target_text) -> dict[str, int]:
    """Attention type -> the target layer (0-based) whose K/V the drafter reads: the
    last layer of that type that stores its full-length K/V (``kv_sharing_modes``)."""
    modes = getattr(target_text, "kv_sharing_modes", None) or []
    out = {}
    for i, (kind, mode) in enumerate(zip(target_text.layer_types, modes)):
        if mode == "store":
            out[kind] = i
    return out


def _experts(target) -> Experts | None:
    """The target's mixture of experts, read from its MoE layers' router and expert weights."""
    moe = [layer for layer in target.get_decoder().layers if getattr(layer, "enable_moe_block", False)]
    if not moe:
        return None
    layer = moe[0]
    gate_up = layer.experts.gate_up_proj  # [experts, 2 · expert width, hidden]
    return Experts(layers=len(moe), num_experts=int(gate_up.shape[0]), top_k=int(layer.router.config.top_k_experts),
                   expert_width=int(gate_up.shape[1]) // 2, mlp_width=int(layer.mlp.down_proj.weight.shape[1]))


def anatomy(pair) -> Anatomy:
    """The loaded pair's drafter, measured from its modules (a :class:`ModelPair`)."""
    target, drafter = pair.target, pair.drafter_model
    t_text = text_config(target.config)
    emb = target.get_input_embeddings().weight
    precision = getattr(pair, "precision", None) or {}
    base = dict(target=pair.target_id, drafter=pair.drafter_id, target_layers=int(t_text.num_hidden_layers),
                target_width=int(emb.shape[1]), vocab=int(emb.shape[0]), target_params=_params(target),
                experts=_experts(target),
                target_precision=precision.get("target") or "", drafter_precision=precision.get("drafter") or "")
    if drafter is None:
        return Anatomy(kind="none", **base)
    d_text = text_config(drafter.config)
    if not pair.has_mtp:
        return Anatomy(kind="model", drafter_params=_params(drafter), drafter_width=int(d_text.hidden_size),
                       drafter_layers=int(d_text.num_hidden_layers), **base)
    producers = _producers(t_text)
    t_layers = target.get_decoder().layers
    layers = []
    for i, layer in enumerate(drafter.model.layers):
        attn = layer.self_attn
        kind = d_text.layer_types[i]
        src = producers.get(kind, -1)
        kv = t_layers[src].self_attn if src >= 0 else None
        head_dim = int(kv.head_dim) if kv is not None else int(attn.head_dim)
        layers.append(DrafterLayer(
            index=i + 1, attention=kind, query_heads=int(attn.q_proj.weight.shape[0]) // int(attn.head_dim),
            reads_target_layer=src + 1, kv_heads=int(kv.k_proj.weight.shape[0]) // head_dim if kv is not None else 0,
            head_dim=head_dim, sliding_window=int(d_text.sliding_window or 0) if kind == "sliding_attention" else 0))
    head = drafter.masked_embedding
    clustered = None if head is None else ClusteredHead(
        centroids=int(head.centroids.weight.shape[0]), top_clusters=int(head.centroid_intermediate_top_k),
        tokens_per_cluster=int(head.vocab_size_per_centroid))
    pre, post = drafter.pre_projection.weight, drafter.post_projection.weight  # [out, in]
    return Anatomy(kind="mtp", drafter_params=_params(drafter), drafter_width=int(pre.shape[0]),
                   drafter_layers=len(drafter.model.layers), input_width=int(pre.shape[1]),
                   projected_width=int(pre.shape[0]), state_width=int(post.shape[0]),
                   layers=tuple(layers), clustered=clustered, **base)
