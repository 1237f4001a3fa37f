"""The package's layers, enforced: engine core < sources < analysis < front ends.

Each module's imports (at any depth: a lazy import inside a function counts too) are
read from its source with ``ast``; nothing is imported to check them.
"""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

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
# The only imports up the layers: ``pair.show()`` and ``rec.show()`` hand their events to
# the notebook front end (a convenience the notebook API promises), lazily, when called.
HANDOFFS = {("mtp_viz.sources.pair", "mtp_viz.notebook"), ("mtp_viz.sources.hf_generate", "mtp_viz.notebook")}
VIEWS = "mtp_viz.app.views"
NOT_IN_VIEWS = ("gradio", "torch", "transformers", "mtp_viz.app.page", "mtp_viz.app.handlers",
                "mtp_viz.app.runtime")


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports(path: Path) -> set[str]:
    """Every module ``path`` imports, ours and others', as absolute dotted names."""
    name, is_pkg = module_name(path), path.name == "__init__.py"
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = name.split(".") if is_pkg else name.split(".")[:-1]
                base = base[:len(base) - node.level + 1]
                mod = ".".join(base + ([node.module] if node.module else []))
            else:
                mod = node.module or ""
            out.add(mod)
            out.update(f"{mod}.{a.name}" for a in node.names)  # a name may be a submodule
    return out


def within(name: str, prefix: str) -> bool:
    return name == prefix or name.startswith(prefix + ".")


def layer_of(name: str) -> str | None:
    return next((layer for layer in ALLOWED if within(name, layer)), None)


MODULES = sorted(PACKAGE.rglob("*.py"))


def violations(path: Path) -> list[str]:
    name = module_name(path)
    layer = layer_of(name)
    bad = []
    for imp in imports(path):
        if within(name, VIEWS) and any(within(imp, n) for n in NOT_IN_VIEWS):
            bad.append(f"{name} (a pure view) imports {imp}")
        if not imp.startswith("mtp_viz") or imp in SHARED or layer is None:
            continue
        theirs = layer_of(imp)
        if theirs and theirs != layer and theirs not in ALLOWED[layer] and (name, theirs) not in HANDOFFS:
            bad.append(f"{name} ({layer}) imports {imp} ({theirs})")
    return bad


@pytest.mark.parametrize("path", MODULES, ids=lambda p: module_name(p))
def test_each_module_imports_only_from_layers_below(path):
    assert violations(path) == []


def test_the_check_catches_an_upward_import(tmp_path, monkeypatch):
    """Negative control: an engine module importing a source, and a view importing
    gradio, are caught."""
    engine = PACKAGE / "engine" / "loop.py"
    view = PACKAGE / "app" / "views" / "charts.py"
    real = Path.read_text

    def planted(self, *args, **kwargs):
        text = real(self, *args, **kwargs)
        if self == engine:
            return text + "\nfrom mtp_viz.sources import models\n"
        if self == view:
            return text + "\ndef f():\n    import gradio\n"
        return text
    monkeypatch.setattr(Path, "read_text", planted)
    assert "mtp_viz.engine.loop (mtp_viz.engine) imports mtp_viz.sources.models (mtp_viz.sources)" \
        in violations(engine)
    assert violations(view) == ["mtp_viz.app.views.charts (a pure view) imports gradio"]


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
