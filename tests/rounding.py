"""Telling rounding from a speculation bug, for targets that compute in bfloat16 or float16.

A forward over k + 1 positions (a verification) does not round exactly as a forward over
one position (plain decoding): the same target, on the same context, gives logits that
differ by a few units in the last place (ULPs) of the dtype. Where its two best tokens lie
closer than that, the two runs may choose differently, and from there their texts part.

:func:`rounding_only` checks exactly that claim: over the common prefix of a plain and a
speculative run, both runs' logits for every position agree within ``ROUNDING_ULPS`` ULPs
(so the target computed the same thing both times, up to rounding), and at the first
position where their tokens differ, each run's token beat the other's by at most that
much in its own logits (a tie at this precision), and each run's token is its own
logits' best. A wrong draft accepted, a correction drawn from the wrong position or a
cache cropped wrongly shows as a token far from its run's best, or as logits that
differ by more than rounding.
"""
from __future__ import annotations

import math

import torch

# Measured on the bundled pair, 12 held-out prompts x 256 tokens, 4 drafts: the logits of
# the two batch shapes differ by at most 2.5 ULPs (of the row's largest logit) in bfloat16
# and in float16, and the first differences lay at gaps of 0-2 ULPs.
ROUNDING_ULPS = 4


class LogitTap:
    """Records, from forward hooks, the logits each forward of ``model`` computed for each
    generated position (the latest forward wins: rows of rejected drafts are computed again
    from the right context by a later one). It taps the base model (where the forward
    starts in the cache, how many tokens) and the head (its rows, soft-capped as the model
    caps them), so it sees the engine's forwards that apply the head themselves
    (``mtp_viz.engine.decoder.with_state``) as well as ``model(...)``'s."""

    def __init__(self, model, prompt_len: int):
        from mtp_viz.engine.config import text_config
        self.rows: dict[int, torch.Tensor] = {}
        self.prompt_len = prompt_len
        self.cap = getattr(text_config(model.config), "final_logit_softcapping", None)
        self._hooks = [model.model.register_forward_pre_hook(self._pre, with_kwargs=True),
                       model.lm_head.register_forward_hook(self._post)]

    def _pre(self, module, args, kwargs):
        cache = kwargs.get("cache")
        self._start = cache.get_seq_length() if cache is not None else 0
        self._n = kwargs["input_ids"].shape[1]

    def _post(self, module, args, out):
        logits = out[0]
        if self.cap is not None:
            logits = torch.tanh(logits / self.cap) * self.cap
        logits = logits.float()
        for r in range(logits.shape[0]):  # row r predicts the token after input position start + n - rows + r
            self.rows[self._start + self._n - logits.shape[0] + r + 1 - self.prompt_len] = logits[r].clone()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        for h in self._hooks:
            h.remove()


def ulp(dtype, x: float) -> float:
    """One unit in the last place of ``dtype`` at magnitude ``x``."""
    return 2.0 ** math.floor(math.log2(max(abs(x), 1e-30))) * torch.finfo(dtype).eps


def first_difference(a, b) -> int | None:
    return next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), None)


def rounding_only(plain_ids, plain_rows, spec_ids, spec_rows, dtype, bound=ROUNDING_ULPS) -> str | None:
    """None when the runs agree, or part only at a tie within rounding; else why not."""
    first = first_difference(plain_ids, spec_ids)
    upto = len(plain_ids) if first is None else first + 1
    for i in range(upto):
        a, b = plain_rows[i], spec_rows[i]
        unit = ulp(dtype, a.abs().max().item())
        if (a - b).abs().max().item() > bound * unit:
            return f"at token {i} the logits differ by {(a - b).abs().max().item() / unit:.1f} ULPs"
    if first is None:
        return None
    x, y = plain_ids[first], spec_ids[first]
    a, b = plain_rows[first], spec_rows[first]
    unit = ulp(dtype, a.abs().max().item())
    for name, rows, mine, other in (("plain", a, x, y), ("speculative", b, y, x)):
        if rows[mine].item() < rows.max().item():
            return f"at token {first} the {name} run's token is not its own logits' best"
        if (rows[mine] - rows[other]).item() > bound * unit:
            return (f"at token {first} the {name} run's token beat the other's by "
                    f"{(rows[mine] - rows[other]).item() / unit:.1f} ULPs, more than rounding")
    return None
