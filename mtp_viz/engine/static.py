"""The compiled engine's static pieces (:mod:`.compiled`): a KV cache of fixed length,
the masks that apply the sliding window to it, and the twin of a model that attends
through them (its weights shared, its attention function and its matrix-vector products
its own)."""
from __future__ import annotations

import copy
import threading

import torch

ATTENTION = "mtp_viz_static"          # the twin's attention function, registered once
STREAMED_ROWS = 5                     # the widest product StreamedLinear streams (a verification of 4 drafts)
_registered = threading.Lock()


def static_attention(module, query, key, value, attention_mask, dropout=0.0, scaling=None, **kwargs):
    """Attention over the static cache, written out so inductor fuses it: softmax(q·kᵀ·s +
    mask)·v with the mask boolean (True = visible). Grouped-query heads without copying
    the KV heads out: query head h reads KV head h // G (G = query heads per KV head, as
    transformers' ``repeat_kv`` orders them), so q [B, H, n, D] is viewed as
    [B, H_kv, G·n, D] and each KV head serves its G query heads in one matmul. Same
    signature and output layout ([B, n, H, D]) as transformers' attention functions."""
    b, h, n, d = query.shape
    h_kv = key.shape[1]
    g = h // h_kv
    q = query.reshape(b, h_kv, g * n, d)
    scale = scaling if scaling is not None else d ** -0.5
    scores = torch.matmul(q, key.transpose(-1, -2)) * scale            # [B, H_kv, G·n, L]
    if attention_mask is not None:
        mask = attention_mask.expand(b, 1, n, -1).repeat(1, 1, g, 1)     # rows follow q's (head, position) order
        scores = scores.masked_fill(~mask, float("-inf"))
    out = torch.matmul(torch.softmax(scores.float(), dim=-1).to(value.dtype), value)  # [B, H_kv, G·n, D]
    return out.reshape(b, h, n, d).transpose(1, 2).contiguous(), None


def _register_attention() -> None:
    from transformers import AttentionInterface
    with _registered:
        AttentionInterface.register(ATTENTION, static_attention)


class StreamedLinear(torch.nn.Linear):
    """A linear layer whose few-row products, inside a compiled graph, are reductions
    inductor writes itself instead of a BLAS call. A decode step (the plain step, the MTP
    drafter's step) multiplies one row by every weight matrix once, so it is bound by
    reading the weights: y[n] = Σ_k x[k]·W[n, k], each output a dot product of a
    contiguous row of W with the input held in cache. On a 2-core AVX-512 EPYC at one
    thread MKL's single-row path streamed the bundled target's 62 MB of float32 weights at
    8.4 GB/s, this at about 17 GB/s (docs/compiled.md). A verification of up to
    :data:`STREAMED_ROWS` rows is one such reduction per row over the same W, which inductor
    fuses into one loop that reads each row of W once for all of them (a float32 target's
    forward of 5 tokens: 11.1 against 13.6 ms through BLAS). Wider, or several rows of
    bfloat16 weights, stay BLAS's: there the reductions measured slower (9 rows: 8.1
    against 7.5 ms for the bundled target's MLPs; bfloat16 at 5 rows 2-3x oneDNN's time).
    Outside a graph (a long prompt's eager prefill) it is ``nn.Linear``; quantized weights
    (a tensor subclass with its own kernel) are never swapped in (:func:`twin`)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        w = self.weight
        rows = x.numel() // x.shape[-1]
        if (not torch.compiler.is_compiling() or rows > STREAMED_ROWS
                or (rows > 1 and w.dtype != torch.float32)):
            return torch.nn.functional.linear(x, w, self.bias)
        x2 = x.reshape(rows, x.shape[-1])
        y = torch.stack([(w * x2[r]).sum(-1) for r in range(rows)])   # [rows, N]
        y = y.reshape(*x.shape[:-1], w.shape[0])
        return y if self.bias is None else y + self.bias


def twin(model):
    """A copy of ``model`` sharing every parameter (nothing of size is copied) with a
    config of its own, set to :data:`ATTENTION`, and its linear layers streamed
    (:class:`StreamedLinear`)."""
    _register_attention()
    other = copy.deepcopy(model, memo={id(p): p for p in model.parameters()})
    for m in other.modules():
        if type(m) is torch.nn.Linear and type(m.weight) is torch.nn.Parameter and m.weight.is_floating_point():
            m.__class__ = StreamedLinear   # the same module, its forward streamed
    for config in {id(c): c for c in (other.config, getattr(other.config, "get_text_config", lambda: None)())
                   if c is not None}.values():
        config._attn_implementation = ATTENTION
    for m in other.modules():   # each module holds the (copied) config it was built with
        c = getattr(m, "config", None)
        if c is not None and hasattr(c, "_attn_implementation"):
            c._attn_implementation = ATTENTION
    return other


def visible(queries: torch.Tensor, length: int, window: int | None) -> torch.Tensor:
    """[1, 1, len(queries), length] bool: key j visible from query position q (j <= q,
    and q - j < window for a sliding layer)."""
    j = torch.arange(length, device=queries.device)[None]
    q = queries[:, None]
    ok = j <= q
    if window:
        ok = ok & (q - j < window)
    return ok[None, None]


class StaticKV:
    """One run's static cache: transformers' ``StaticCache`` at one capacity, every layer
    full-length, and how many of its positions hold verified tokens (``length``)."""

    def __init__(self, config, capacity: int):
        from transformers import StaticCache
        from transformers.cache_utils import StaticLayer
        self.cache = StaticCache(config=config, max_cache_len=capacity)
        self.cache.layers = [StaticLayer(capacity) for _ in self.cache.layers]
        self.capacity, self.length = capacity, 0

    def crop(self, n: int) -> None:
        """``crop(-k)``: forget the newest k positions (as ``DynamicCache.crop`` does)."""
        if n < 0:
            self.cache.crop(n)
            self.length += n

    def reset(self) -> None:
        if self.length:
            self.crop(-self.length)


__all__ = ["ATTENTION", "STREAMED_ROWS", "StaticKV", "StreamedLinear", "static_attention", "twin", "visible"]
