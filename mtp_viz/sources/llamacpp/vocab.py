"""A Gemma 4 tokenizer as llama.cpp tokenizes: two kinds, each written so that llama.cpp
gives transformers' token ids for the same text.

- Gemma's own (real checkpoints): SentencePiece-style BPE with byte fallback. Written the
  way llama.cpp's converter writes it (tokenizer model ``gemma4``: every token in id order
  via ``gguf.LlamaHfVocab``, byte tokens typed as bytes, the chat-channel markers kept
  visible, the merges).
- GPT-2-style byte-level BPE (the bundled tiny pair's): written as a ``gpt2`` vocabulary with
  the ``gpt-2`` pre-tokenizer, which splits text with the same regular expression as the
  tokenizer's ByteLevel pre-tokenizer, and with BOS added as its post-processor adds it.

Any other tokenizer (word-level, unigram, a byte-level one with other rules) has no
llama.cpp counterpart that would tokenize the same: refused in one sentence rather than
written to tokenize differently.
"""
from __future__ import annotations

import json
import logging
from pathlib import Path

from mtp_viz.errors import UserError, clip

# the tokens Gemma 4's chat parser reads back: llama.cpp must render them (its converter's list)
VISIBLE = {"<|channel>", "<channel|>", "<|tool_call>", "<tool_call|>", "<|tool_response>",
           "<tool_response|>", '<|"|>'}


def kind(folder: Path, spec: str) -> str:
    """"gemma4" or "gpt2": which of llama.cpp's tokenizers tokenizes as this one does."""
    path = folder / "tokenizer.json"
    if not path.is_file():
        raise UserError(f"{clip(spec)} has no tokenizer.json, so llama.cpp could not tokenize as it does.")
    tok = json.loads(path.read_text(encoding="utf-8"))
    model, pre = tok.get("model", {}), tok.get("pre_tokenizer") or {}
    if (model.get("type") == "BPE" and model.get("byte_fallback")
            and (tok.get("decoder") or {}).get("type") == "Sequence"):
        return "gemma4"
    if (model.get("type") == "BPE" and not model.get("byte_fallback") and tok.get("normalizer") is None
            and pre.get("type") == "ByteLevel" and pre.get("use_regex", True) and not pre.get("add_prefix_space")):
        return "gpt2"
    raise UserError(f"{clip(spec)}'s tokenizer ({model.get('type', 'unknown')}) has no llama.cpp counterpart "
                    "that tokenizes the same; Gemma's own and GPT-2-style byte-level BPE have.")


def write(writer, folder: Path, spec: str, n_vocab: int) -> None:
    """The tokenizer's metadata, its token list padded to the model's ``n_vocab`` rows (the
    embedding may have more rows than the tokenizer has tokens; llama.cpp needs one token
    per row, and the extra rows are marked unused, as the converter marks them)."""
    import gguf

    which = kind(folder, spec)
    tokens, types = _gemma4(folder) if which == "gemma4" else _gpt2(folder, spec)
    if len(tokens) > n_vocab:
        raise UserError(f"{clip(spec)}'s tokenizer has {len(tokens)} tokens but its model only {n_vocab}.")
    for i in range(len(tokens), n_vocab):
        tokens.append(f"[PAD{i}]".encode())
        types.append(gguf.TokenType.UNUSED)
    writer.add_tokenizer_model(which)
    if which == "gpt2":
        writer.add_tokenizer_pre("gpt-2")
    writer.add_token_list(tokens)
    if which == "gemma4":
        writer.add_token_scores([-1000.0] * len(tokens))   # BPE ranks come from the merges
    writer.add_token_types(types)
    gguf_logger = logging.getLogger("gguf")
    level = gguf_logger.level
    gguf_logger.setLevel(logging.ERROR)  # its notes on the pair template's second <bos> concern no one here
    try:
        special = gguf.SpecialVocab(folder, load_merges=True)
    finally:
        gguf_logger.setLevel(level)
    special.add_special_token["bos"] = True   # transformers' post-processor adds BOS to every prompt
    special.add_to_gguf(writer, quiet=True)
    writer.add_add_space_prefix(False)


def _gemma4(folder: Path) -> tuple[list[bytes], list[int]]:
    """As llama.cpp's converter lists Gemma's tokens (``Gemma4Model.set_vocab``)."""
    import gguf

    vocab = gguf.LlamaHfVocab(folder)   # AutoTokenizer on the folder alone: no remote code, no download
    tokens, types = [], []
    for text, _score, toktype in vocab.all_tokens():
        tokens.append(text)
        types.append(gguf.TokenType.USER_DEFINED if text.decode() in VISIBLE else toktype)
    return tokens, types


def _gpt2(folder: Path, spec: str) -> tuple[list[bytes], list[int]]:
    """Every token by id, as text in the byte-level alphabet (what llama.cpp's gpt2 vocabulary
    holds); the tokenizer's added tokens typed control when special, user-defined when not."""
    import gguf

    tok = json.loads((folder / "tokenizer.json").read_text(encoding="utf-8"))
    by_id = {i: t for t, i in tok["model"]["vocab"].items()}
    added = {a["id"]: a for a in tok.get("added_tokens", [])}
    by_id.update({i: a["content"] for i, a in added.items()})
    if sorted(by_id) != list(range(len(by_id))):
        raise UserError(f"{clip(spec)}'s tokenizer skips ids, so llama.cpp could not number its tokens the same.")
    types = [gguf.TokenType.NORMAL] * len(by_id)
    for i, a in added.items():
        types[i] = gguf.TokenType.CONTROL if a.get("special") else gguf.TokenType.USER_DEFINED
    return [by_id[i].encode() for i in range(len(by_id))], types
