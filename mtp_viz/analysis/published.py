"""Published acceptance of Gemma 4's MTP drafters, cited, as the α of the project's model.

The table ships as ``assets/acceptance/published.json`` and is written out, figure by
figure, in docs/published-acceptance.md: each figure with its setting (the model and its
size, the task, the draft length γ, the engine, precision and hardware where given) and
its source (a link, where in it, and what it says). Pure: nothing is read at import;
:func:`load` reads the file and checks every entry, one sentence (UserError) for the
first thing wrong.

A figure is published as one of two kinds, and converts to the per-token acceptance α of
Leviathan et al.'s geometric model, E(α, γ) = (1 − α^(γ+1)) / (1 − α) tokens per
verification step (:mod:`mtp_viz.engine.theory`, Eq. 1), at the γ it was measured with:

- ``tau``: mean tokens per verification step (vLLM's "acceptance length", 1 + accepted ÷
  steps): α solves E(α, γ) = τ (:func:`mtp_viz.engine.theory.alpha_from_tau`);
- ``acceptance``: drafts accepted ÷ drafts made (llama.cpp's "draft acceptance"), γ
  drafted every step, so a = (E(α, γ) − 1) / γ: α solves that
  (:func:`mtp_viz.engine.theory.alpha_from_acceptance`).

Both give the one α that, the same at every position, reproduces the figure. An MTP
drafter accepts less the further it drafts, so that α used at another γ is an
extrapolation; every row says the γ its figure was measured at. :func:`rows` gives a
cost profile's predicted speedup (:func:`mtp_viz.analysis.payoff.speedup`) at each
figure's α, each row labelled with the model size the figure was published for.
"""
from __future__ import annotations

import dataclasses
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mtp_viz.engine import theory
from mtp_viz.errors import UserError
from mtp_viz.paths import assets_dir

from . import payoff

DOC = "docs/published-acceptance.md"
SIZES = ("E2B", "E4B", "12B", "26B-A4B", "31B")   # Gemma 4's sizes, as its checkpoints name them
CONVERSION = {
    "tau": "α solves E(α, γ) = τ, with E(α, γ) = (1 − α^(γ+1)) / (1 − α) tokens per verification step",
    "acceptance": "α solves (E(α, γ) − 1) / γ = a, with a = drafts accepted ÷ drafts made and γ drafted every step",
}
KINDS = tuple(CONVERSION)


@dataclass(frozen=True)
class Source:
    link: str       # where to read it (https)
    where: str      # in it: a file's path in a repository, or a pull request
    says: str       # the statement, quoted or put in one line


@dataclass(frozen=True)
class Figure:
    """One published figure and the setting it was measured in."""
    id: str
    model: str                       # the target's hub id
    assistant: str                   # its MTP drafter's
    model_size: str                  # one of SIZES
    task: str
    draft_tokens: int                # γ, the drafts of every step
    engine: str
    value: float                     # the figure as published
    kind: str                        # "tau" or "acceptance" (see the module's docstring)
    as_published: str                # the figure's text in the source, as written there
    source: Source
    doc: str                         # its section of docs/published-acceptance.md
    precision: str | None = None     # None: the source does not say
    hardware: str | None = None
    setting: str | None = None       # how it was run: decoding, prompts, lengths
    checked: str | None = None       # what of it this project could read in the source


@dataclass(frozen=True)
class Note:
    """A published statement that is not a figure (that there is none, for one)."""
    id: str
    says: str
    source: Source
    doc: str


CHAT = "vllm-e4b-mt-bench"   # the figure a page reads as "the acceptance published for chat"


def table_path() -> Path:
    return assets_dir() / "acceptance" / "published.json"


_FIGURE_FIELDS = {f.name for f in dataclasses.fields(Figure)}
_REQUIRED = ("id", "model", "assistant", "model_size", "task", "engine", "kind", "as_published", "doc")
_OPTIONAL = ("precision", "hardware", "setting", "checked")


def _text(value: Any) -> bool:
    return isinstance(value, str) and bool(value.strip())


def _source(item: Any) -> Source | None:
    if not isinstance(item, dict) or not all(_text(item.get(k)) for k in ("link", "where", "says")):
        return None
    if not item["link"].startswith("https://"):
        return None
    return Source(item["link"], item["where"], item["says"])


def _problem(item: Any, seen: set[str]) -> str:
    """What is wrong with one figure's entry, "" if nothing."""
    if not isinstance(item, dict):
        return "is not an object"
    if set(item) - _FIGURE_FIELDS:
        return "has a field this table does not know"
    if _source(item.get("source")) is None:
        return "has no source with an https link, a where and what it says"
    missing = [k for k in _REQUIRED if not _text(item.get(k))]
    if missing:
        return f"has no {missing[0]}"
    if any(item.get(k) is not None and not isinstance(item[k], str) for k in _OPTIONAL):
        return "has a precision, hardware, setting or checked that is not text"
    if item["id"] in seen:
        return "has the id of another figure"
    if item["model_size"] not in SIZES:
        return f"has a model_size that is none of {', '.join(SIZES)}"
    if item["kind"] not in KINDS:
        return f"has a kind that is none of {', '.join(KINDS)}"
    if not item["doc"].startswith(DOC + "#"):
        return f"has a doc that is no section of {DOC}"
    gamma, value = item.get("draft_tokens"), item.get("value")
    if not isinstance(gamma, int) or isinstance(gamma, bool) or gamma < 1:
        return "has no draft_tokens of at least 1"
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        return "has no value"
    low, high = (1.0, gamma + 1.0) if item["kind"] == "tau" else (0.0, 1.0)
    if not low <= value <= high:
        return f"has a {item['kind']} outside [{low:g}, {high:g}] for its draft_tokens"
    return ""


def _read(path: str | Path | None) -> tuple[list[Figure], list[Note]]:
    """Every figure and note of the table at ``path`` (default: the shipped one), checked."""
    path = Path(path) if path else table_path()
    bad = f"The published acceptance table {path.name}"
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        raise UserError(f"{bad} cannot be read as JSON.") from None
    items = data.get("figures") if isinstance(data, dict) else None
    if not isinstance(items, list) or not items:
        raise UserError(f"{bad} has no list of figures.")
    figures, seen = [], set()
    for i, item in enumerate(items, 1):
        problem = _problem(item, seen)
        if problem:
            raise UserError(f"{bad} is not usable: figure {i} {problem}.")
        seen.add(item["id"])
        fields = {k: item.get(k) for k in _FIGURE_FIELDS - {"source", "value"}}
        figures.append(Figure(**fields, value=float(item["value"]), source=_source(item["source"])))
    notes = []
    for i, item in enumerate(data.get("notes") or [], 1):
        source = _source(item.get("source")) if isinstance(item, dict) else None
        if source is None or not all(_text(item.get(k)) for k in ("id", "says", "doc")):
            raise UserError(f"{bad} is not usable: note {i} has no id, says, doc or source with an https link.")
        notes.append(Note(item["id"], item["says"], source, item["doc"]))
    return figures, notes


def load(path: str | Path | None = None) -> list[Figure]:
    """The table's figures (default: the one shipped in the package), each checked."""
    return _read(path)[0]


def notes(path: str | Path | None = None) -> list[Note]:
    """The table's notes: what was published that is not a figure."""
    return _read(path)[1]


def alpha(figure: Figure) -> float:
    """The figure as the per-token acceptance α, at the γ it was measured with."""
    if figure.kind == "tau":
        return theory.alpha_from_tau(figure.value, figure.draft_tokens)
    return theory.alpha_from_acceptance(figure.value, figure.draft_tokens)


def conversion(figure: Figure) -> str:
    """How :func:`alpha` turned this figure into α, in one line."""
    g = figure.draft_tokens
    if figure.kind == "tau":
        return f"τ = {figure.value:g} at γ = {g}: α solves E(α, {g}) = {figure.value:g}"
    return f"{figure.value:g} of drafts accepted at γ = {g}: α solves (E(α, {g}) − 1) / {g} = {figure.value:g}"


def model_size(name: str) -> str | None:
    """The Gemma 4 size a preset or a model's name is (``e4b``, ``google/gemma-4-E4B-it``,
    a folder named ``gemma-4-31B-it``: E4B, E4B, 31B); None for any other model."""
    name = name.strip()
    if name.upper() in SIZES:   # a preset's key is its size in lower case
        return name.upper()
    found = re.search(r"gemma-4-(E2B|E4B|12B|26B-A4B|31B)(?![0-9A-Za-z])", name, re.IGNORECASE)
    return found.group(1).upper() if found else None


def label(figure: Figure) -> str:
    """``at the acceptance published for E4B on MT-Bench (vLLM, γ=2)``: always the size it was
    published for, never the profiled pair's."""
    where = f", on {figure.hardware}" if figure.hardware else ""
    return (f"at the acceptance published for {figure.model_size} on {figure.task} "
            f"({figure.engine}, γ={figure.draft_tokens}{where})")


@dataclass(frozen=True)
class Row:
    """A profile's predicted speedup at one published figure's α."""
    figure: Figure
    alpha: float
    same_model: bool                 # the figure's model size is the profiled pair's
    profile_draft_tokens: int
    speedup_at_profile_draft_tokens: float
    speedup_at_own_draft_tokens: float | None   # None: the profile did not time the figure's γ + 1

    @property
    def label(self) -> str:
        return label(self.figure)

    def as_dict(self) -> dict[str, Any]:
        return {**dataclasses.asdict(self.figure), "label": self.label, "same_model": self.same_model,
                "alpha": self.alpha, "conversion": conversion(self.figure),
                "profile_draft_tokens": self.profile_draft_tokens,
                "speedup_at_profile_draft_tokens": self.speedup_at_profile_draft_tokens,
                "speedup_at_own_draft_tokens": self.speedup_at_own_draft_tokens}


def rows(plain: float, verify: dict[int, float], draft: float, draft_tokens: int, size: str | None,
         figures: list[Figure] | None = None) -> list[Row]:
    """The speedup S(α, γ) of an engine's measured costs (:func:`mtp_viz.analysis.payoff.speedup`:
    ``plain``, ``verify`` by width, ``draft``) at each figure's α: at the profile's γ
    (``draft_tokens``) and at the figure's own γ where its width was timed. ``size`` is the
    profiled pair's (:func:`model_size`); its own size's figures come first."""
    out = []
    for f in load() if figures is None else figures:
        a = alpha(f)
        own = (payoff.speedup(a, f.draft_tokens, plain, verify, draft)
               if f.draft_tokens + 1 in verify else None)
        out.append(Row(f, a, f.model_size == size, draft_tokens,
                       payoff.speedup(a, draft_tokens, plain, verify, draft), own))
    return sorted(out, key=lambda r: not r.same_model)


__all__ = ["CHAT", "CONVERSION", "DOC", "Figure", "KINDS", "Note", "Row", "SIZES", "Source", "alpha", "conversion",
           "label", "load", "model_size", "notes", "rows", "table_path"]
