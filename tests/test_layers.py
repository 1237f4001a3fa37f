"""The package's layers, enforced: engine core < sources < analysis < front ends.

Each module's imports (at any depth: a lazy import inside a function counts too) are
read from its source with ``ast`` (``tests/package_imports.py``); nothing is imported to
check them. There is no exception.
"""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

from package_imports import imports as _imports
from package_imports import module_name as _module_name
from package_imports import modules

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "mtp_viz"
SHARED = ("mtp_viz", "mtp_viz.errors", "mtp_viz.paths", "mtp_viz.prompts")  # any layer may use these

# layer -> the layers (package prefixes) it may import, besides itself and SHARED
ALLOWED = {
    "mtp_viz.engine": (),
    "mtp_viz.sources": ("mtp_viz.engine",),
    "mtp_viz.analysis": ("mtp_viz.engine",),
    "mtp_viz.cli": ("mtp_viz.engine", "mtp_viz.sources", "mtp_viz.analysis"),
    "mtp_viz.app": ("mtp_viz.engine", "mtp_viz.sources", "mtp_viz.analysis", "mtp_viz.cli"),
    "mtp_viz.notebook": ("mtp_viz.engine", "mtp_viz.sources", "mtp_viz.analysis", "mtp_viz.cli", "mtp_viz.app"),
}
VIEWS = "mtp_viz.app.views"
NOT_IN_VIEWS = ("gradio", "torch", "transformers", "mtp_viz.app.page", "mtp_viz.app.handlers",
                "mtp_viz.app.runtime")
KNOWN = frozenset(modules(PACKAGE))


def module_name(path: Path) -> str:
    return _module_name(path, ROOT)


def imports(path: Path) -> set[str]:
    """Every module ``path`` imports, ours and others', as absolute dotted names."""
    return _imports(path, ROOT, KNOWN)


def within(name: str, prefix: str) -> bool:
    return name == prefix or name.startswith(prefix + ".")


def layer_of(name: str) -> str | None:
    return next((layer for layer in ALLOWED if within(name, layer)), None)


MODULES = sorted(PACKAGE.rglob("*.py"))


def violations(path: Path) -> list[str]:
    name = module_name(path)
    layer = layer_of(name)
    bad = []
    for imp in sorted(imports(path)):
        if within(name, VIEWS) and any(within(imp, n) for n in NOT_IN_VIEWS):
            bad.append(f"{name} (a pure view) imports {imp}")
        if not imp.startswith("mtp_viz") or imp in SHARED or layer is None:
            continue
        theirs = layer_of(imp)
        if theirs and theirs != layer and theirs not in ALLOWED[layer]:
            bad.append(f"{name} ({layer}) imports {imp} ({theirs})")
    return bad


@pytest.mark.parametrize("path", MODULES, ids=lambda p: module_name(p))
def test_each_module_imports_only_from_layers_below(path):
    assert violations(path) == []


def test_the_check_catches_an_upward_import(tmp_path, monkeypatch):
    """Negative control: an engine module importing a source, a view importing gradio,
    and a source importing the notebook lazily (inside a method, relative to nothing:
    as ``pair.show()`` once did) are caught."""
    engine = PACKAGE / "engine" / "loop.py"
    view = PACKAGE / "app" / "views" / "charts.py"
    source = PACKAGE / "sources" / "pair.py"
    real = Path.read_text

    def planted(self, *args, **kwargs):
        text = real(self, *args, **kwargs)
        if self == engine:
            return text + "\nfrom mtp_viz.sources import models\n"
        if self == view:
            return text + "\ndef f():\n    import gradio\n"
        if self == source:
            return text + "\nclass Drawn:\n    def show(self):\n        from mtp_viz.notebook import show_events\n"
        return text
    monkeypatch.setattr(Path, "read_text", planted)
    assert "mtp_viz.engine.loop (mtp_viz.engine) imports mtp_viz.sources.models (mtp_viz.sources)" \
        in violations(engine)
    assert violations(view) == ["mtp_viz.app.views.charts (a pure view) imports gradio"]
    assert violations(source) == ["mtp_viz.sources.pair (mtp_viz.sources) imports mtp_viz.notebook (mtp_viz.notebook)"]


def test_the_package_folder_holds_at_most_eight_modules():
    flat = sorted(p.name for p in PACKAGE.glob("*.py"))
    assert len(flat) <= 8, flat


def test_no_function_is_longer_than_100_lines():
    long = []
    for path in MODULES:
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.end_lineno - node.lineno + 1 > 100:
                long.append(f"{module_name(path)}.{node.name}: {node.end_lineno - node.lineno + 1} lines")
    assert long == []
