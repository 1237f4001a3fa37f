"""The compiled engine's static pieces (:mod:`.compiled`): a KV cache of fixed length,
the masks that apply the sliding window to it, and the twin of a model that attends
through them (its weights shared, its attention function and its matrix-vector products
its own)."""
from __future__ import annotations

import copy
import threading

import torch

ATTENTION = "mtp_viz_static"          # the twin's attention function, registered once
STREAMED_ROWS = 5                     # the widest product inductor's reductions stream (no kernel: 4 drafts)
MAX_ROWS = 16                         # the widest product the kernel takes (kernels.MAX_ROWS: 15 drafts)
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
    """A linear layer whose few-row products, inside a compiled graph, read each row of W
    once for all rows. A decode step (the plain step, the MTP drafter's step) multiplies one
    row by every weight matrix, and a verification of k drafts k + 1 rows, so it is bound by
    reading the weights: y[m, n] = Σ_k x[m, k]·W[n, k], each output a dot product of a
    contiguous row of W with a row of x held in cache.

    On an x86-64 CPU that product is the engine's own kernel (``torch.ops.mtp_viz.rows``,
    :mod:`.kernels`) for up to :data:`~.kernels.MAX_ROWS` rows of float32, bfloat16 or
    torchao's int8 weight-only weights: each output's value is the same whatever the number
    of rows, so a verification's logits equal the plain steps' bit for bit, and on a
    Sapphire Rapids core it streams bfloat16 at 22-26 GB/s for 1 to 9 rows where ATen's
    ``linear`` reads 13-14 (docs/compiled.md). Where the kernel is not there (another CPU,
    a GPU, no compiler) a product of up to :data:`STREAMED_ROWS` float32 rows, or one row of
    bfloat16, is reductions inductor writes itself, wider ones BLAS's. Outside a graph (a
    long prompt's eager prefill) it is ``nn.Linear``; int8 weights stay on the kernel."""

    isa = 0          # the kernel's instruction set on this CPU (:func:`twin` sets it); 0: no kernel
    int8 = None      # int8 weights as the kernel reads them: (q [N, K] int8, scale [N] float32)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        w = self.weight
        rows = x.numel() // x.shape[-1]
        if self.int8 is not None:
            return self._int8(x, rows)
        if torch.compiler.is_compiling() and self.isa and rows <= MAX_ROWS:
            if w.dtype == x.dtype and w.dtype in (torch.float32, torch.bfloat16):
                return torch.ops.mtp_viz.rows(x, w, None, self.bias, self.isa)
        if (not torch.compiler.is_compiling() or rows > STREAMED_ROWS
                or (rows > 1 and w.dtype != torch.float32)):
            return torch.nn.functional.linear(x, w, self.bias)
        x2 = x.reshape(rows, x.shape[-1])
        y = torch.stack([(w * x2[r]).sum(-1) for r in range(rows)])   # [rows, N]
        y = y.reshape(*x.shape[:-1], w.shape[0])
        return y if self.bias is None else y + self.bias

    def _int8(self, x: torch.Tensor, rows: int) -> torch.Tensor:
        """int8 weights on the kernel at any number of rows, :data:`MAX_ROWS` a call: a
        prompt's rows too, since torchao's CPU product widens the whole of W to float32 for
        every call (Zen 4, random E2B, 32 prompt tokens and one step at one thread: 5.35 s
        through torchao, 0.53 s here). Each output's value is the one a decode step gives
        its row."""
        q, scale = self.int8
        if rows <= MAX_ROWS:
            return torch.ops.mtp_viz.rows(x, q, scale, self.bias, self.isa)
        x2 = x.reshape(rows, x.shape[-1])
        y = torch.cat([torch.ops.mtp_viz.rows(x2[i:i + MAX_ROWS], q, scale, self.bias, self.isa)
                       for i in range(0, rows, MAX_ROWS)])
        return y.reshape(*x.shape[:-1], q.shape[0])


def _int8_rows(w) -> tuple[torch.Tensor, torch.Tensor] | None:
    """torchao's int8 weight-only tensor (W = q·scale, one scale per row, no zero point) as
    the kernel's (q, scale), sharing its storage; None for any other weight."""
    q, scale, zero = (getattr(w, a, None) for a in ("qdata", "scale", "zero_point"))
    if (q is None or scale is None or q.dtype != torch.int8 or q.dim() != 2
            or scale.numel() != q.shape[0] or (zero is not None and bool(zero.any()))):
        return None
    return q.contiguous(), scale.reshape(-1).float()


def twin(model):
    """A copy of ``model`` sharing every parameter (nothing of size is copied) with a
    config of its own, set to :data:`ATTENTION`, and its linear layers streamed
    (:class:`StreamedLinear`, on the engine's kernel where this CPU runs it)."""
    from . import hugepages, kernels
    _register_attention()
    other = copy.deepcopy(model, memo={id(p): p for p in model.parameters()})
    cpu = all(p.device.type == "cpu" for p in model.parameters())
    isa = kernels.isa() if cpu else 0
    streamed = []
    for m in other.modules():
        if type(m) is not torch.nn.Linear:
            continue
        if type(m.weight) is torch.nn.Parameter and m.weight.is_floating_point():
            m.__class__ = StreamedLinear   # the same module, its forward streamed
            m.isa = isa
            streamed.append(m.weight)
        elif isa and (q := _int8_rows(m.weight)) is not None:
            m.__class__ = StreamedLinear
            m.isa, m.int8 = isa, q
            streamed.append(q[0])
    if cpu:   # what a step streams, in 2 MB pages where Linux can (in place: shared with the model)
        hugepages.collapse(streamed)
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
