"""The package's layers, enforced: engine core < sources < analysis < measurement and views
< front ends (the CLI, the app, the notebook: none imports another) < the top level.

Each module's imports (at any depth: a lazy import inside a function counts too, and so
does a module a registry names in a string for ``importlib``) are read from its source
with ``ast`` (``tests/package_imports.py``); nothing is imported to check them.
"""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

from package_imports import imports as _imports, module_name as _module_name, modules

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "mtp_viz"
SHARED = ("mtp_viz.errors", "mtp_viz.paths", "mtp_viz.prompts", "mtp_viz.version")  # any layer may use these
# Above every layer, so no module of the package imports them: the public API names every
# layer's modules (imported on first use), and the `mtp-viz` command names the CLI's and the
# app's subcommands.
TOP = ("mtp_viz", "mtp_viz.__main__")

# layer -> the layers (package prefixes) it may import, besides itself and SHARED
CORE = ("mtp_viz.engine", "mtp_viz.sources", "mtp_viz.analysis")
# Side by side below every front end: the measurement layer (timed runs, records, their
# reduction, the traffic sweep) and the pure views (events in, HTML or figures out).
BELOW_FRONT_ENDS = (*CORE, "mtp_viz.measure", "mtp_viz.views")
ALLOWED = {
    "mtp_viz.engine": (),
    "mtp_viz.sources": ("mtp_viz.engine",),
    "mtp_viz.analysis": ("mtp_viz.engine",),
    "mtp_viz.measure": CORE,
    "mtp_viz.views": CORE,
    # the front ends, side by side: none imports another
    "mtp_viz.cli": BELOW_FRONT_ENDS,
    "mtp_viz.app": BELOW_FRONT_ENDS,
    "mtp_viz.notebook": BELOW_FRONT_ENDS,
}
FRONT_ENDS = ("mtp_viz.cli", "mtp_viz.app", "mtp_viz.notebook")
VIEWS = "mtp_viz.views"
NOT_IN_VIEWS = ("gradio", "torch", "transformers")
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
        if imp in TOP and name not in TOP:
            bad.append(f"{name} imports {imp}, above every layer")
        if name in SHARED and within(imp, "mtp_viz") and imp not in SHARED:
            bad.append(f"{name} (shared by every layer) imports {imp}")
        if not imp.startswith("mtp_viz") or imp in SHARED or layer is None:
            continue
        theirs = layer_of(imp)
        if not theirs or theirs == layer or theirs in ALLOWED[layer]:
            continue
        another = ", another front end" if theirs in FRONT_ENDS and layer in FRONT_ENDS else ""
        bad.append(f"{name} ({layer}) imports {imp} ({theirs}){another}")
    return bad


@pytest.mark.parametrize("path", MODULES, ids=lambda p: module_name(p))
def test_each_module_imports_only_from_layers_below(path):
    assert violations(path) == []


def test_the_check_catches_an_upward_import(tmp_path, monkeypatch):
    """Negative control: an engine module importing a source, a view importing gradio,
    a source importing the notebook lazily (inside a method, as ``pair.show()`` once
    did), an analysis module importing the public API or naming a view in a registry's
    string, and a shared module importing a layer are caught."""
    engine = PACKAGE / "engine" / "loop.py"
    view = PACKAGE / "views" / "charts.py"
    source = PACKAGE / "sources" / "pair.py"
    analysis = PACKAGE / "analysis" / "metrics.py"
    shared = PACKAGE / "prompts.py"
    real = Path.read_text

    def planted(self, *args, **kwargs):
        text = real(self, *args, **kwargs)
        if self == engine:
            return text + "\nfrom mtp_viz.sources import models\n"
        if self == view:
            return text + "\ndef f():\n    import gradio\n"
        if self == source:
            return text + "\nclass Drawn:\n    def show(self):\n        from mtp_viz.notebook import show_events\n"
        if self == shared:
            return text + "\ndef f():\n    from .sources import presets\n"
        if self == analysis:
            return text + "\nVIEWS = {'tokens': 'mtp_viz.views.tokens:step_html'}\nfrom mtp_viz import launch\n"
        return text
    monkeypatch.setattr(Path, "read_text", planted)
    assert "mtp_viz.engine.loop (mtp_viz.engine) imports mtp_viz.sources.models (mtp_viz.sources)" \
        in violations(engine)
    assert violations(view) == ["mtp_viz.views.charts (a pure view) imports gradio"]
    assert violations(source) == ["mtp_viz.sources.pair (mtp_viz.sources) imports mtp_viz.notebook (mtp_viz.notebook)"]
    assert violations(analysis) == [  # through the public API, and through a registry's string
        "mtp_viz.analysis.metrics imports mtp_viz, above every layer",
        "mtp_viz.analysis.metrics (mtp_viz.analysis) imports mtp_viz.views.tokens (mtp_viz.views)"]
    assert violations(shared) == ["mtp_viz.prompts (shared by every layer) imports mtp_viz.sources.presets"]


def test_a_front_end_importing_another_front_end_is_caught(monkeypatch):
    """Negative control, with no allow-list: the app importing the notebook (lazily) or the
    CLI's generate, the CLI naming the app in a registry's string (as ``mtp-viz ui`` once
    did), the notebook importing the CLI's bench or the app's layout (as ``launch`` once
    did) are caught; so are the measurement layer and a view importing a front end."""
    app = PACKAGE / "app" / "handlers" / "local.py"
    cli = PACKAGE / "cli" / "main.py"
    notebook = PACKAGE / "notebook" / "__init__.py"
    measure = PACKAGE / "measure" / "runner.py"
    real = Path.read_text

    def planted(self, *args, **kwargs):
        text = real(self, *args, **kwargs)
        if self == app:
            return text + "\ndef f():\n    from mtp_viz.notebook import show\n    from mtp_viz.cli import generate\n"
        if self == cli:
            return text + "\nSUBCOMMANDS['ui'] = ('mtp_viz.app.page.layout', 'Start the app.')\n"
        if self == notebook:
            return text + "\ndef g():\n    from mtp_viz.cli.bench import run\n    from mtp_viz.app.page import layout\n"
        if self == measure:
            return text + "\ndef h():\n    from mtp_viz.cli import bench_report\n"
        return text
    monkeypatch.setattr(Path, "read_text", planted)
    assert violations(app) == [
        "mtp_viz.app.handlers.local (mtp_viz.app) imports mtp_viz.cli.generate (mtp_viz.cli), another front end",
        "mtp_viz.app.handlers.local (mtp_viz.app) imports mtp_viz.notebook (mtp_viz.notebook), another front end"]
    assert violations(cli) == [
        "mtp_viz.cli.main (mtp_viz.cli) imports mtp_viz.app.page.layout (mtp_viz.app), another front end"]
    assert violations(notebook) == [
        "mtp_viz.notebook (mtp_viz.notebook) imports mtp_viz.app.page.layout (mtp_viz.app), another front end",
        "mtp_viz.notebook (mtp_viz.notebook) imports mtp_viz.cli.bench (mtp_viz.cli), another front end"]
    assert violations(measure) == [
        "mtp_viz.measure.runner (mtp_viz.measure) imports mtp_viz.cli.bench_report (mtp_viz.cli)"]


def test_no_front_end_imports_another():
    """Across the whole package, lazily or not, through a registry's string or not: the
    front ends meet only at the top level (``mtp_viz.launch``, the ``mtp-viz`` command)."""
    crossing = sorted(f"{module_name(path)} -> {imp}" for path in MODULES for imp in imports(path)
                      if (mine := layer_of(module_name(path))) in FRONT_ENDS
                      and layer_of(imp) in FRONT_ENDS and layer_of(imp) != mine)
    assert crossing == []


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
