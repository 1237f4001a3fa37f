"""Held-out evaluation prompts: beginnings of functions / classes from held-out stdlib files."""

from __future__ import annotations

import json
import re
from pathlib import Path

from .data import read_text

_DEF = re.compile(r"^(    )?(def|class|async def) \w+", re.M)


def extract_prompts(tokenizer, held_files, n: int = 12, min_tokens: int = 30, max_tokens: int = 80):
    """Take at most one definition per file (files in sorted order, the first long-enough definition whose
    body is at least a few lines), cut to at most `max_tokens` tokens at a line boundary."""
    prompts = []
    for rel in held_files:
        text = read_text(rel)
        for m in _DEF.finditer(text):
            chunk = text[m.start() : m.start() + 2000]
            lines = chunk.split("\n")
            out, best = "", None
            for line in lines:
                cand = out + line + "\n"
                ntok = len(tokenizer(cand, add_special_tokens=False)["input_ids"])
                if ntok > max_tokens:
                    break
                out = cand
                if ntok >= min_tokens:
                    best = out
            if best and best.count("\n") >= 3:
                prompts.append({"file": rel, "prompt": best,
                                "num_tokens": len(tokenizer(best, add_special_tokens=False)["input_ids"])})
                break
        if len(prompts) >= n:
            break
    return prompts


def write_eval_prompts(tokenizer, held_files, path: Path, n: int = 12):
    prompts = extract_prompts(tokenizer, held_files, n=n)
    path.write_text(json.dumps({
        "description": "Beginnings of definitions from standard-library files held out from training "
                       "(chosen by a hash of the file path; see training/data.py).",
        "prompts": prompts,
    }, indent=2) + "\n")
    return prompts
