"""Prompt suites: the one reader for every JSON prompt file the project uses.

A suite is ``{"prompts": [...]}`` or a bare list; each item is a string or a dict with
the text under ``text`` or ``prompt`` and optional ``id``, ``category``, ``title`` and
``file``. Two suites ship in the package: ``prompts.json`` (categories for instruction
models: code, JSON, summarization, translation, chat, creative) and
``assets/tiny/eval_prompts.json`` (held-out standard-library code for the bundled pair).
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from .errors import UserError
from .paths import assets_dir


@dataclass(frozen=True)
class Prompt:
    id: str
    category: str
    text: str
    title: str = ""

    @property
    def label(self) -> str:
        """A one-line label for a picker: category · title (or the text's start)."""
        short = " ".join((self.title or self.text).split())
        short = short[:70] + ("…" if len(short) > 70 else "")
        return f"{self.category} · {short}"


def category_suite() -> Path:
    return assets_dir() / "prompts.json"


def code_suite() -> Path:
    return assets_dir() / "tiny" / "eval_prompts.json"


def load_prompts(path: str | Path | None = None, categories: str | None = None,
                 per_category: int = 0, default_category: str = "uncategorized") -> list[Prompt]:
    """Prompts of a suite (default: the category suite), filtered by comma-separated
    ``categories`` and capped at ``per_category`` each (0: all)."""
    path = Path(path) if path else category_suite()
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        raise UserError(f"Cannot read the prompt file {path.name} as JSON.") from None
    items = data.get("prompts", data) if isinstance(data, dict) else data
    prompts = []
    for i, item in enumerate(items if isinstance(items, list) else []):
        if isinstance(item, str):
            item = {"text": item}
        text = (item.get("text") or item.get("prompt")) if isinstance(item, dict) else None
        if not isinstance(text, str) or not text.strip():
            continue
        title = str(item.get("title") or item.get("file") or "")
        prompts.append(Prompt(str(item.get("id") or f"prompt-{i + 1}"),
                              str(item.get("category") or default_category), text, title))
    if categories:
        keep = {c.strip() for c in categories.split(",") if c.strip()}
        prompts = [p for p in prompts if p.category in keep]
    if per_category > 0:
        seen: dict[str, int] = {}
        capped = []
        for p in prompts:
            seen[p.category] = seen.get(p.category, 0) + 1
            if seen[p.category] <= per_category:
                capped.append(p)
        prompts = capped
    if not prompts:
        raise UserError(f"No prompts to run in {path.name} (after filtering).")
    return prompts
