"""Nothing asks which kind of source or engine it has, outside the module that defines it.

A source says what it can do (``Source.capabilities``) and a run's start event says what
ran (``engine.events.Ran``); everything else reads those. Detected from the source with
``ast``: a comparison (``==``, ``!=``, ``in``, ``not in``) with a kind's name as a string
literal (alone or in a tuple, list or set) or with a constant holding one (``VLLM``), and
an ``isinstance`` of a source or decoder class. Each kind may be asked about in its own
module only. Reading a name as data (a key in a table, a label) is not asking.
"""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "mtp_viz"

# a kind's name -> the modules (dotted prefixes) where it may be compared
KINDS = {
    "vllm": ("mtp_viz.sources.vllm", "mtp_viz.app.handlers.servers"),
    "llamacpp": ("mtp_viz.sources.llamacpp",),
    "llama.cpp": ("mtp_viz.sources.llamacpp",),
    "compiled": ("mtp_viz.engine.compiled",),
    "eager": ("mtp_viz.engine.decoder",),
}
CONSTANTS = {"VLLM": KINDS["vllm"], "LLAMACPP": KINDS["llamacpp"]}
CLASSES = {
    "VllmSource": KINDS["vllm"], "LocalSource": ("mtp_viz.sources.local",),
    "LlamaCppSource": KINDS["llamacpp"], "FastTarget": KINDS["compiled"],
    "FastDraftStep": KINDS["compiled"], "EagerDecoder": KINDS["eager"], "EagerDraftStep": KINDS["eager"],
}


def _module(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _names(node: ast.AST) -> list[str]:
    """The kind names a comparison operand holds: string literals, alone or in a collection,
    and constants named like a kind."""
    items = node.elts if isinstance(node, (ast.Tuple, ast.List, ast.Set)) else [node]
    out = []
    for item in items:
        if isinstance(item, ast.Constant) and isinstance(item.value, str) and item.value in KINDS:
            out.append(item.value)
        elif isinstance(item, (ast.Name, ast.Attribute)):
            name = item.id if isinstance(item, ast.Name) else item.attr
            if name in CONSTANTS:
                out.append(name)
    return out


def kind_checks(path: Path) -> list[tuple[int, str]]:
    """(line, kind) of every kind check in ``path``."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Compare):
            for operand in [node.left, *node.comparators]:
                found += [(node.lineno, k) for k in _names(operand)]
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "isinstance" \
                and len(node.args) == 2:
            classes = node.args[1].elts if isinstance(node.args[1], ast.Tuple) else [node.args[1]]
            for c in classes:
                name = c.id if isinstance(c, ast.Name) else c.attr if isinstance(c, ast.Attribute) else ""
                if name in CLASSES:
                    found.append((node.lineno, name))
    return found


def _allowed(module: str, kind: str) -> bool:
    owners = KINDS.get(kind) or CONSTANTS.get(kind) or CLASSES[kind]
    return any(module == o or module.startswith(o + ".") for o in owners)


MODULES = sorted(PACKAGE.rglob("*.py"))


@pytest.mark.parametrize("path", MODULES, ids=lambda p: _module(p))
def test_no_module_asks_which_kind_it_has(path: Path):
    module = _module(path)
    bad = [f"line {line}: {kind}" for line, kind in kind_checks(path) if not _allowed(module, kind)]
    assert not bad, f"{module} asks which kind of source or engine it has: {bad}"


def test_the_detector_sees_each_form(tmp_path: Path):
    code = ('if settings.get("backend") == "vllm": pass\n'
            'if key != VLLM: pass\n'
            'if engine in ("compiled", "x"): pass\n'
            'if isinstance(target, FastTarget): pass\n'
            'label = {"vllm": "a server"}["vllm"]\n')  # a table read as data: not a check
    f = tmp_path / "m.py"
    f.write_text(code)
    assert kind_checks(f) == [(1, "vllm"), (2, "VLLM"), (3, "compiled"), (4, "FastTarget")]
