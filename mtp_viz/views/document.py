"""One document type for every report: headings, paragraphs and tables as a list of blocks,
rendered as markdown (``bench.md``, ``profile.md``, what the CLI prints) or as escaped HTML
(``bench.html``, the app's cost profile). Pure: strings in, a string out; a report writes its
words once, as blocks, and never parses one rendering back into another.

A block is ``(level, text)`` for a heading (``"h1"``, ``"h2"``, ``"h3"``), ``("p", text)`` for a
paragraph (its lines kept: one paragraph may hold several), or ``("table", Table)``.
"""
from __future__ import annotations

import html as _html
from dataclasses import dataclass
from typing import Any, Iterable

HEADINGS = {"h1": "# ", "h2": "## ", "h3": "### "}


@dataclass(frozen=True)
class Table:
    head: tuple[str, ...]
    rows: tuple[tuple[str, ...], ...] = ()


Block = tuple[str, Any]


def markdown(blocks: Iterable[Block]) -> str:
    """The blocks as markdown, one blank line between two (a pipe table for a Table)."""
    parts = []
    for kind, b in blocks:
        if kind == "table":
            parts.append("\n".join(["| " + " | ".join(b.head) + " |", "|" + "---|" * len(b.head),
                                    *("| " + " | ".join(r) + " |" for r in b.rows)]))
        else:
            parts.append(HEADINGS.get(kind, "") + b)
    return "\n\n".join(parts) + "\n"


def html(blocks: Iterable[Block], table_class: str = "") -> str:
    """The blocks as HTML, every text escaped (a model's or a server's name comes from outside);
    a table in a horizontally scrolling box, its ``class`` ``table_class``."""
    esc = _html.escape
    cls = f' class="{esc(table_class)}"' if table_class else ""
    out = []
    for kind, b in blocks:
        if kind == "table":
            head = "".join(f"<th>{esc(h)}</th>" for h in b.head)
            body = "".join("<tr>" + "".join(f"<td>{esc(c)}</td>" for c in r) + "</tr>" for r in b.rows)
            out.append(f'<div class="mv-scroll"><table{cls}><tr>{head}</tr>{body}</table></div>')
        elif kind in HEADINGS:
            out.append(f"<{kind}>{esc(b)}</{kind}>")
        else:
            out.append("<p>" + "<br>".join(esc(line) for line in b.split("\n")) + "</p>")
    return "".join(out)


__all__ = ["Block", "HEADINGS", "Table", "html", "markdown"]
