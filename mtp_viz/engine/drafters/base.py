"""The drafter protocol and what passes between a drafter and the loop."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Protocol

import torch

# pick(raw_logits[V]) -> (token id, q of that token, processed q distribution [V] or None
# when greedy: acceptance then needs only the target's argmax)
Pick = Callable[[torch.Tensor], tuple[int, float, "torch.Tensor | None"]]
# keep(index, q) -> False stops drafting after this token (confidence schedule)
Keep = Callable[[int, float], bool]


@dataclass
class DraftContext:
    """What the target knows after its last forward.

    ids: the whole sequence, prompt + generated, ending with the newest token (not yet
    seen by the target). hidden: [1, 1, H] the target's last-layer activation that
    predicted that token. shared_kv: per layer type, (K, V) [1, heads, S, D] covering the
    verified tokens before the newest one (Gemma 4 targets only)."""
    ids: list[int]
    hidden: torch.Tensor | None = None
    shared_kv: dict[str, tuple[torch.Tensor, torch.Tensor]] | None = None


@dataclass
class Proposal:
    tokens: list[int]
    q_tokens: list[float] | None = None  # drafter's probability of each token; None = certain
    q: torch.Tensor | None = None  # [len(tokens), V] distributions drawn from (sampling only)
    forwards: int = 0              # drafter forward passes spent
    compile_seconds: float = 0.0   # compiling a drafter graph (compiled engine), not drafting


class Drafts:
    """Collects one step's drafts: each token, its q, and its q row when sampling."""

    def __init__(self, pick: Pick, keep: Keep):
        self.pick, self.keep = pick, keep
        self.tokens, self.q_tokens, self.rows = [], [], []

    def take(self, logits: torch.Tensor) -> bool:
        """Pick a token from the drafter's logits; False when drafting should stop."""
        tok, q_tok, q_row = self.pick(logits)
        self.tokens.append(tok)
        self.q_tokens.append(q_tok)
        self.rows.append(q_row)
        return self.keep(len(self.tokens) - 1, q_tok)

    def proposal(self) -> Proposal:
        q = torch.stack(self.rows) if self.rows and self.rows[0] is not None else None
        return Proposal(self.tokens, self.q_tokens, q, forwards=len(self.tokens))


class Drafter(Protocol):
    kind: str
    needs_target_state: bool  # wants hidden states + shared KV from every target forward
    default_draft_tokens: int

    def reset(self) -> None: ...
    def propose(self, ctx: DraftContext, k: int, pick: Pick, keep: Keep) -> Proposal: ...
    def rollback(self, verified_len: int) -> None: ...


def num_assistant_tokens(model, fallback: int = 4) -> int:
    n = getattr(getattr(model, "generation_config", None), "num_assistant_tokens", None)
    return int(n) if n else fallback
