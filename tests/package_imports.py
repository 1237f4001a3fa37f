"""What a package's modules import, read from their source with ``ast`` (nothing is
imported to find out), for the layer test (``tests/test_layers.py``) and the cycle check
(``tests/test_packaging.py``).

- Every import counts, at any depth: one inside a function (a lazy import) too.
- A package is named by its package name (``mtp_viz.notebook``, not
  ``mtp_viz.notebook.__init__``), as an import names it.
- A relative import is resolved against the importing module (``from .x import y`` in
  ``a.b.c`` is ``a.b.x``; in the package ``a.b`` it is ``a.b.x`` too).
- ``from a import b`` imports the module ``a.b`` when the package holds one, else the
  name ``b`` from ``a``'s ``__init__``, and then it imports ``a``.
- A string that names one of the package's submodules (``"mtp_viz.app.page.layout"``,
  or ``"mtp_viz.engine.drafters.mtp:MTPDrafter"``) is an import too: that is how a
  registry hands a module to ``importlib.import_module`` (the CLI's subcommands, the
  drafters, the public names of ``mtp_viz/__init__.py``).
"""
from __future__ import annotations

import ast
from pathlib import Path


def module_name(path: Path, root: Path) -> str:
    """``path``'s dotted name, ``root`` being the folder that holds the top package."""
    parts = list(path.relative_to(root).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules(package: Path) -> dict[str, Path]:
    """Every module of ``package`` (a folder), by dotted name."""
    return {module_name(p, package.parent): p for p in sorted(package.rglob("*.py"))}


def imports(path: Path, root: Path, known: set[str] | frozenset[str] = frozenset()) -> set[str]:
    """Every module ``path`` imports, ours and others', as absolute dotted names.
    ``known``: the package's own modules, which tell a submodule from a name."""
    name, is_pkg = module_name(path, root), path.name == "__init__.py"
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
            subs = {f"{mod}.{a.name}" for a in node.names}
            if mod in known:  # ours: a submodule, or a name from the package's __init__
                out.update(subs & known)
                if subs - known:
                    out.add(mod)
            else:  # another's: either may be a module
                out.add(mod)
                out.update(subs)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            named = node.value.split(":")[0]
            if named in known and "." in named:  # not the top package's bare name, a word too
                out.add(named)
    return out


def import_graph(package: Path) -> dict[str, set[str]]:
    """Each module of ``package`` -> the package's modules it imports (not itself)."""
    files = modules(package)
    known = set(files)
    return {m: {i for i in imports(p, package.parent, known) if i in known and i != m} for m, p in files.items()}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Every import cycle of ``graph`` (each elementary circuit once, starting at its
    smallest name), found within its strongly connected parts."""
    found: list[list[str]] = []
    for part in _strongly_connected(graph):
        for start in sorted(part):
            allowed = {m for m in part if m >= start}  # a circuit is found from its smallest module only
            stack = [(start, [start])]
            while stack:
                node, trail = stack.pop()
                for n in sorted(graph[node] & allowed, reverse=True):
                    if n == start:
                        found.append(trail)
                    elif n not in trail:
                        stack.append((n, trail + [n]))
    return sorted(found, key=lambda c: (len(c), c))


def _strongly_connected(graph: dict[str, set[str]]) -> list[set[str]]:
    """The parts of ``graph`` (Tarjan's algorithm, iterative) in which every module
    reaches every other: those of more than one module hold the cycles."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    parts = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                part = set()
                while True:
                    m = stack.pop()
                    on_stack.discard(m)
                    part.add(m)
                    if m == node:
                        break
                if len(part) > 1:
                    parts.append(part)
    return parts
