"""Top candidates per position, recorded for the token inspector, and only when asked.

``engine.speculative(..., top=k)`` and ``engine.autoregressive(..., top=k)`` put on
their events the k most probable tokens of each distribution a decision used:

- q, the drafter's distribution at each draft (``Drafted.q_top*``): the processed one
  the draft was drawn from under sampling, the softmax of its raw logits under greedy
  (as ``Drafted.q``);
- p, the target's distribution at each verified position (``p_top*`` on ``accepted``,
  ``rejected``, ``bonus``, ``token``), processed the same way (as the events' ``p``);
- after a rejection under sampling, the residual norm(max(0, p − q)) that the
  correction was drawn from (``Bonus.residual_top*``);
- for a drafter with a clustered head (Gemma 4 E2B/E4B), the clusters it scored for
  each draft (``Drafted.clusters``) and, for each rejected draft, whether the target's
  most probable token lay in them (``Rejected.target_in_clusters``).

Off by default: the benchmarks never ask, so they pay nothing for it.
"""
from __future__ import annotations

import threading
import weakref
from typing import Any, Sequence

import torch

from .sampling import Sampler, residual

__all__ = ["TopK", "ClusterTap"]


class ClusterTap:
    """The clusters a Gemma 4 clustered head (``Gemma4AssistantMaskedEmbedder``) scores.

    The head scores ``num_centroids`` clusters from the drafter's final state, keeps
    the ``centroid_intermediate_top_k`` best, and gives real logits only to the tokens
    of those clusters (``token_ordering`` lists the vocabulary cluster by cluster);
    every other token shares one floor logit. A forward hook on its centroid layer
    reads the cluster scores of each drafter forward, per thread (a shared model may
    serve several runs); the hook goes when this tap does."""

    def __init__(self, head):
        self.top = int(head.centroid_intermediate_top_k)
        order = head.token_ordering.long()
        # cluster_of[token] = the cluster holding it: its place in token_ordering ÷ cluster size
        self.cluster_of = torch.empty_like(order)
        self.cluster_of[order] = torch.arange(order.numel(), device=order.device) // head.vocab_size_per_centroid
        last: dict[int, torch.Tensor] = {}  # thread -> that thread's latest cluster scores
        self._last = last

        def keep(module, args, out):
            last[threading.get_ident()] = out.detach()

        handle = head.centroids.register_forward_hook(keep)
        weakref.finalize(self, handle.remove)

    def scores(self) -> torch.Tensor:
        """The cluster scores of this thread's latest drafter forward."""
        return self._last.pop(threading.get_ident())

    def chosen(self, scores: torch.Tensor) -> list[int]:
        """The clusters the head kept for these scores, best first (the head's own
        ``torch.topk`` over the same numbers)."""
        return scores.reshape(-1, scores.shape[-1])[-1].topk(self.top).indices.tolist()

    def holds(self, clusters: Sequence[int], token: int) -> bool:
        return int(self.cluster_of[token]) in set(clusters)


def clustered_head(drafter: Any):
    """The drafter's clustered head, or None (no MTP drafter, or a full softmax head)."""
    return getattr(getattr(drafter, "assistant", None), "masked_embedding", None)


class TopK:
    """Records one run's top candidates; the engine asks it for each event's fields."""

    def __init__(self, k: int, sampler: Sampler, drafter: Any = None, detok: Any = None):
        self.k, self.sampler, self.detok = int(k), sampler, detok
        head = clustered_head(drafter)
        self.tap = ClusterTap(head) if head is not None else None
        # this step's drafts, as pick saw them: (raw logits, q row or None, cluster scores or None)
        self._seen: list[tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None]] = []
        self._clusters: list[list[int] | None] = []  # this step's drafts: the clusters scored

    def _fields(self, name: str, ids: list[int], probs: list[float], ctx: Sequence[int]) -> dict:
        fields = {f"{name}_top_ids": tuple(ids), f"{name}_top": tuple(probs)}
        if self.detok is not None:
            fields[f"{name}_top_text"] = tuple(self.detok.pieces(ctx, ids))
        return fields

    def _top(self, probs: torch.Tensor) -> tuple[list, list]:
        """The k best of [..., V] probabilities: (ids, probs) as lists, best first."""
        vals, idx = probs.topk(min(self.k, probs.shape[-1]), dim=-1)
        return idx.tolist(), vals.tolist()

    # -- draft ----------------------------------------------------------------------
    def wrap(self, pick):
        """The drafter's ``pick``, also keeping what each draft came from. Only references
        are kept here, inside the drafter's timing; :meth:`drafted` does the work."""
        def pick_and_keep(logits: torch.Tensor):
            tok, q_tok, q_row = pick(logits)
            self._seen.append((logits, q_row, self.tap.scores() if self.tap else None))
            return tok, q_tok, q_row
        return pick_and_keep

    def drafted(self, ids: Sequence[int], drafts: Sequence[int]) -> list[dict]:
        """Fields of each draft's ``drafted`` event. A drafter that never called pick
        (prompt lookup) was certain: q = one-hot of its draft."""
        out = []
        self._clusters = []
        for i, tok in enumerate(drafts):
            ctx = list(ids) + list(drafts[:i])
            if i < len(self._seen):
                logits, q_row, scores = self._seen[i]
                # greedy picks skip building q; its top then comes from softmax(raw logits)
                q = q_row if q_row is not None else torch.softmax(logits.float(), dim=-1)
                fields = self._fields("q", *self._top(q), ctx)
                clusters = self.tap.chosen(scores) if scores is not None else None
                if clusters is not None:
                    fields["clusters"] = tuple(clusters)
                self._clusters.append(clusters)
            else:
                fields = self._fields("q", [tok], [1.0], ctx)
            out.append(fields)
        self._seen = []
        return out

    # -- verify ---------------------------------------------------------------------
    def verdict(self, ids: Sequence[int], logits: torch.Tensor, p: torch.Tensor | None,
                drafts: Sequence[int], q: torch.Tensor | None, n: int) -> "Verdict":
        """Fields of the step's ``accepted``/``rejected``/``bonus`` events.

        logits: [k+1, V] the verify forward's raw logits; p: their processed
        distributions (None when greedy: p is then their softmax); q: [k, V] the
        drafter's distributions (sampling only; None when certain); n: drafts kept."""
        probs = p if p is not None else torch.softmax(logits, dim=-1)
        top_ids, top_p = self._top(probs)
        ctx = [list(ids) + list(drafts[:i]) for i in range(len(drafts) + 1)]
        at = [self._fields("p", top_ids[i], top_p[i], ctx[i]) for i in range(len(top_ids))]
        rejected = {}
        for i in range(n, len(drafts)):
            clusters = self._clusters[i] if i < len(self._clusters) else None
            if clusters is not None:
                rejected[i] = {"target_in_clusters": "yes" if self.tap.holds(clusters, top_ids[i][0]) else "no"}
        bonus = {}
        if not self.sampler.greedy and n < len(drafts):
            r_ids, r_probs = self._top(residual(probs[n], None if q is None else q[n], drafts[n]))
            bonus = self._fields("residual", r_ids, r_probs, ctx[n])
        self._clusters = []  # the step is decided
        return Verdict(at, rejected, bonus)

    def token(self, ids: Sequence[int], logits: torch.Tensor, p: torch.Tensor | None) -> dict:
        """Fields of an autoregressive ``token`` event (logits [1, V])."""
        probs = p if p is not None else torch.softmax(logits, dim=-1)
        top_ids, top_p = self._top(probs[0])
        return self._fields("p", top_ids, top_p, ids)


class Verdict:
    """The top-candidate fields of one step's verdict events, by kind and position."""

    def __init__(self, at: list[dict], rejected: dict[int, dict], bonus: dict):
        self._at, self._rejected, self._bonus = at, rejected, bonus

    def __call__(self, kind: str, i: int) -> dict:
        fields = dict(self._at[i])
        if kind == "rejected":
            fields.update(self._rejected.get(i, {}))
        elif kind == "bonus":
            fields.update(self._bonus)
        return fields


def no_fields(kind: str, i: int) -> dict:
    """The verdict fields when nothing is recorded."""
    return {}
