"""Offline corpus: the Python standard library's own source code.

Every machine with Python has it, so the bundled pair can be rebuilt without any download.
Files are split into train / held-out deterministically by a hash of their path relative to the
stdlib root, so the same files are held out on every machine with the same Python version.
"""

from __future__ import annotations

import hashlib
import os
import sysconfig
from pathlib import Path

SPECIAL_TOKENS = ["<pad>", "<eos>", "<bos>", "<unk>"]
PAD, EOS, BOS, UNK = 0, 1, 2, 3

# Test suites are skipped: they are large, repetitive and not representative of library code.
_SKIP_DIRS = {"site-packages", "dist-packages", "__pycache__", "test", "tests", "idle_test"}


def stdlib_root() -> Path:
    return Path(sysconfig.get_paths()["stdlib"])


def list_stdlib_files(root: Path | None = None) -> list[str]:
    """Relative paths (posix style, sorted) of the stdlib's *.py files, test suites excluded."""
    root = root or stdlib_root()
    out = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if d not in _SKIP_DIRS)
        for name in filenames:
            if name.endswith(".py"):
                out.append(Path(dirpath, name).relative_to(root).as_posix())
    return sorted(out)


def is_held_out(rel_path: str, every: int = 20) -> bool:
    """Deterministic ~5% hold-out by a hash of the relative path."""
    digest = hashlib.sha256(rel_path.encode("utf-8")).digest()
    return int.from_bytes(digest[:4], "little") % every == 0


def split_files(root: Path | None = None) -> tuple[list[str], list[str]]:
    files = list_stdlib_files(root)
    train = [f for f in files if not is_held_out(f)]
    held = [f for f in files if is_held_out(f)]
    return train, held


def read_text(rel_path: str, root: Path | None = None) -> str:
    root = root or stdlib_root()
    try:
        return (root / rel_path).read_text(encoding="utf-8")
    except (UnicodeDecodeError, OSError):
        return ""


def train_tokenizer(texts, vocab_size: int = 4096):
    """Byte-level BPE (any text round-trips, whitespace included) wrapped as a PreTrainedTokenizerFast."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE(unk_token=None, byte_fallback=False))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=2,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(texts, trainer=trainer)
    assert [tok.token_to_id(t) for t in SPECIAL_TOKENS] == [PAD, EOS, BOS, UNK]
    # Like Gemma's tokenizer, prepend <bos> when encoding a single text.
    tok.post_processor = processors.TemplateProcessing(
        single="<bos> $A", pair="<bos> $A <bos> $B", special_tokens=[("<bos>", BOS)]
    )
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token="<bos>",
        eos_token="<eos>",
        pad_token="<pad>",
        unk_token="<unk>",
        clean_up_tokenization_spaces=False,
    )
    return fast


def encode_files(tokenizer, rel_paths, root: Path | None = None) -> list[list[int]]:
    """One id list per file: <bos> ids... <eos>."""
    texts = [read_text(p, root) for p in rel_paths]
    texts = [t for t in texts if t.strip()]
    enc = tokenizer(texts, add_special_tokens=True)["input_ids"]
    return [ids + [EOS] for ids in enc]
