"""The documentation: a README a newcomer reads in five minutes, the rest as pages under
docs/ that build with mkdocs, and every contract of the code documented somewhere.

The contracts are collected from the code, not from the docs: every element id
(``elem_id="..."``) and ``data-`` attribute the app writes, every ``MTP_VIZ_``
variable the package names, and every ``--flag`` of the command line and of
``mtp-viz ui``. Each must appear in README.md or a page under docs/."""
from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "mtp_viz"
README_MAX_LINES = 300

# Element ids left out on purpose: hidden routing elements a visitor never sees. Copy link
# (#share-link) presses the hidden #share-build button, whose handler puts the link's query
# into the hidden #share-query box for the page script; neither is part of the page's contract.
INTERNAL_IDS = {"share-build", "share-query"}


def _documented_text() -> str:
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    return "\n".join(p.read_text(encoding="utf-8") for p in pages)


def _read(paths) -> list[tuple[Path, str]]:
    return [(p, p.read_text(encoding="utf-8")) for p in sorted(set(paths))]


def contracts() -> dict[str, set[str]]:
    """kind -> the names the code defines, as the docs would write them."""
    app = _read([*(PACKAGE / "app").rglob("*.py"), *(PACKAGE / "views").rglob("*.py")])  # the page and its views
    cli = _read([*(PACKAGE / "cli").glob("*.py"), PACKAGE / "app" / "page" / "layout.py"])
    return {
        "element id": {f"#{i}" for _, s in app for i in re.findall(r'elem_id="([^"]+)"', s)}
        - {f"#{i}" for i in INTERNAL_IDS},
        "data attribute": {a for _, s in app for a in re.findall(r"\b(data-[a-z][a-z-]*)", s)},
        "environment variable": {v for _, s in _read(PACKAGE.rglob("*.py"))
                                 for v in re.findall(r"\bMTP_VIZ_[A-Z0-9_]+", s)},
        "flag": {f for _, s in cli for f in re.findall(r'add_argument\(\s*"(--[a-z0-9][a-z0-9-]*)"', s)},
    }


def test_the_contracts_are_found_in_the_code():
    found = contracts()
    # the collection itself works: a few names each kind is known to hold
    assert {"#compare-panel", "#trace-upload", "#vllm-url"} <= found["element id"]
    assert {"data-speedup", "data-kind", "data-verdict"} <= found["data attribute"]
    assert {"MTP_VIZ_ALLOWED_MODELS", "MTP_VIZ_THREADS"} <= found["environment variable"]
    assert {"--target", "--compile", "--concurrency", "--share"} <= found["flag"]
    assert not INTERNAL_IDS & {i.lstrip("#") for i in found["element id"]}


def test_every_contract_is_documented():
    text = _documented_text()
    missing = []
    for kind, names in contracts().items():
        for name in sorted(names):
            # the whole name: #model must not count as documented through #model-status
            tail = r"(?![A-Za-z0-9_])" if kind == "environment variable" else r"(?![\w-])"
            if not re.search(re.escape(name) + tail, text):
                missing.append(f"{kind} {name}")
    assert not missing, "not documented in README.md or docs/*.md:\n  " + "\n  ".join(missing)


def test_readme_is_short():
    lines = (ROOT / "README.md").read_text(encoding="utf-8").splitlines()
    assert len(lines) <= README_MAX_LINES, f"README.md has {len(lines)} lines; at most {README_MAX_LINES}"


def _links(markdown: str) -> list[str]:
    """Targets of the Markdown links and images outside code blocks and code spans."""
    text = re.sub(r"^```.*?^```", "", markdown, flags=re.S | re.M)
    text = re.sub(r"`[^`\n]*`", "", text)
    return re.findall(r"!?\[[^\]]*\]\(([^)\s]+)\)", text)


def _anchors(page: Path) -> set[str]:
    """The heading anchors mkdocs gives a page (Python-Markdown's toc slugs)."""
    from markdown.extensions.toc import slugify

    text = re.sub(r"^```.*?^```", "", page.read_text(encoding="utf-8"), flags=re.S | re.M)
    out = set()
    for title in re.findall(r"^#{1,6} +(.+?) *#*$", text, flags=re.M):
        out.add(slugify(re.sub(r"[`*_]", "", title), "-"))
    return out


def test_readme_links_point_to_files_that_exist():
    readme = ROOT / "README.md"
    broken = []
    links = [t for t in _links(readme.read_text(encoding="utf-8")) if not re.match(r"[a-z][a-z0-9+.-]*:", t)]
    assert len(links) > 10  # the README links its screenshot and every docs page
    for target in links:
        path, _, anchor = target.partition("#")
        dest = (ROOT / path) if path else readme
        if not dest.exists():
            broken.append(f"{target}: no such file")
        elif anchor and dest.suffix == ".md" and anchor not in _anchors(dest):
            broken.append(f"{target}: no heading with that anchor")
    assert not broken, "README.md links to:\n  " + "\n  ".join(broken)


def test_readme_links_every_docs_page():
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    linked = {t.partition("#")[0] for t in _links(text)}
    pages = {f"docs/{p.name}" for p in (ROOT / "docs").glob("*.md")}
    assert not pages - linked, f"docs pages the README does not link: {sorted(pages - linked)}"


def test_mkdocs_builds_strict(tmp_path):
    # mkdocs is in the test extra (pip install -e ".[test]"): without it this fails, never skips
    result = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
                            cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    assert (tmp_path / "site" / "index.html").exists()
    for page in (ROOT / "docs").glob("*.md"):
        name = "index.html" if page.stem == "index" else f"{page.stem}/index.html"
        assert (tmp_path / "site" / name).exists(), f"{page.name} was not built"


def _resolves(parts: list[str], base: Path) -> bool:
    """Whether a dotted name under ``base`` is a module of the package, or a name one defines."""
    import importlib
    for i in range(len(parts), 0, -1):
        where = base.joinpath(*parts[:i])
        if where.with_suffix(".py").exists() or (where / "__init__.py").exists():
            module = ".".join(where.relative_to(ROOT).parts)
            try:
                obj = importlib.import_module(module)
                for name in parts[i:]:
                    obj = getattr(obj, name)
            except (ImportError, AttributeError):
                return False
            return True
    return False


def test_every_reference_in_the_code_points_at_something_that_exists():
    """A docstring or comment that names ``mtp_viz.x.y``, ``:mod:`.x``` (relative to its own
    package) or a path such as ``views/stats.py`` names a module, a name it defines or a file
    of the repository: a reference left behind by a move fails here."""
    broken = []
    for path, text in _read(PACKAGE.rglob("*.py")):
        where = path.relative_to(ROOT)
        for name in re.findall(r"(?<!ops\.)\b(mtp_viz(?:\.[A-Za-z_]\w*)+)", text):   # not torch.ops.mtp_viz
            if not _resolves(name.split("."), ROOT):
                broken.append(f"{where}: {name}")
        for dots, name in re.findall(r":(?:mod|func|class|data|attr|meth):`~?(\.+)([\w.]+)`", text):
            base = path.parent
            for _ in range(len(dots) - 1):
                base = base.parent
            if not _resolves(name.split("."), base):
                broken.append(f"{where}: {dots}{name}")
        for ref in re.findall(r"(?<![\w/.-])((?:[a-z_]+/)+[\w-]+\.(?:py|md|sh|json|ipynb))\b", text):
            if not any((base / ref).exists() for base in (ROOT, PACKAGE, path.parent)):
                broken.append(f"{where}: {ref}")
    assert not broken, "references to nothing:\n" + "\n".join(broken)


def _architecture_rows() -> dict[str, str]:
    """docs/architecture.md's map of the code: package folder (``mtp_viz/engine/``; the
    ``mtp_viz/*.py`` row is ``mtp_viz/``) -> the text of its row."""
    text = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    rows = {}
    for package, rest in re.findall(r"^\| `(mtp_viz/[^`]*)` \|(.*)$", text, re.M):
        rows[package.removesuffix("*.py")] = rest
    return rows


def test_the_architecture_map_names_every_module():
    """Every module of the package is named (```name.py```) in the row of its own package
    in docs/architecture.md's map of the code, and every subpackage has a row of its own or
    is named (```name/```) in its parent's row: a module added without its line fails here."""
    rows = _architecture_rows()
    assert {"mtp_viz/", "mtp_viz/engine/", "mtp_viz/app/page/"} <= rows.keys()  # the reading itself works
    missing = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if "assets" in path.relative_to(PACKAGE).parts:
            continue
        folder = path.parent.relative_to(ROOT).as_posix() + "/"
        if path.name == "__init__.py":
            if path.parent != PACKAGE and folder not in rows:
                parent = path.parent.parent.relative_to(ROOT).as_posix() + "/"
                if f"`{path.parent.name}/`" not in rows.get(parent, ""):
                    missing.append(f"{folder} (no row of its own, and not named in {parent}'s)")
        elif f"`{path.name}`" not in rows.get(folder, ""):
            missing.append(f"{folder}{path.name} (not in {folder}'s row)")
    assert not missing, "docs/architecture.md's map of the code does not name:\n  " + "\n  ".join(missing)
