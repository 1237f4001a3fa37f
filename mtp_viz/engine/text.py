"""Token ids → display text, for event ``text`` fields.

A token's text depends on its neighbours (leading spaces in SentencePiece, bytes
merged across tokens in byte-level BPE), so a piece is computed as the difference
between decoding a short context tail with and without the token.
"""
from __future__ import annotations

from typing import Sequence

TAIL = 6  # context tokens used to render one piece


class Detokenizer:
    def __init__(self, tokenizer, skip_special_tokens: bool = False):
        self.tokenizer = tokenizer
        self.skip = skip_special_tokens

    def decode(self, ids: Sequence[int]) -> str:
        return self.tokenizer.decode(list(ids), skip_special_tokens=self.skip,
                                     clean_up_tokenization_spaces=False)

    def piece(self, context: Sequence[int], token: int) -> str:
        return self.pieces(context, [token])[0]

    def pieces(self, context: Sequence[int], tokens: Sequence[int]) -> list[str]:
        """The piece of each of ``tokens`` as the next token after ``context``."""
        tail = list(context[-TAIL:])
        before = self.decode(tail)
        out = []
        for token in tokens:
            after = self.decode(tail + [token])
            out.append(after[len(before):] if after.startswith(before) else self.decode([token]))
        return out
