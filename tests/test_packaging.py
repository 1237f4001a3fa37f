"""Deployable as it stands: a wheel carries the bundled pair and runs it from any folder,
requirements.txt matches pyproject.toml, the Space's front matter names the tested
Gradio, the package has no import cycle, and `spaces` changes nothing off ZeroGPU."""
from __future__ import annotations

import importlib.util
import json
import re
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from package_imports import cycles, import_graph

ROOT = Path(__file__).resolve().parent.parent


def _front_matter() -> dict[str, str]:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    block = re.match(r"---\n(.*?)\n---\n", text, re.S)
    assert block, "README.md starts with Space front matter"
    return dict(re.findall(r"^(\w+): *(.*)$", block.group(1), re.M))


def test_front_matter_names_the_tested_gradio_and_the_app():
    import gradio
    fm = _front_matter()
    assert fm["sdk"] == "gradio" and fm["app_file"] == "app.py"
    assert fm["sdk_version"] == gradio.__version__
    for key in ("title", "emoji", "colorFrom", "colorTo", "python_version", "license", "short_description"):
        assert fm.get(key), key
    assert "google/gemma-4-E2B-it-assistant" in (ROOT / "README.md").read_text().split("---")[1]


def test_requirements_match_pyproject():
    block = re.search(r"^dependencies = \[(.*?)^\]", (ROOT / "pyproject.toml").read_text(), re.S | re.M)
    deps = re.findall(r'"([^"]+)"', block.group(1))  # tomllib is 3.11+; the project runs on 3.10
    reqs = [line.strip() for line in (ROOT / "requirements.txt").read_text().splitlines()
            if line.strip() and not line.startswith("#")]
    assert sorted(reqs) == sorted(deps)


@pytest.mark.slow   # a fresh process or a wheel build: seconds; CI's slow tier runs it
def test_wheel_carries_the_bundled_pair_and_runs_it_from_any_folder(tmp_path):
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation",
                    "-q", "-w", str(tmp_path / "dist"), str(ROOT)], check=True, timeout=600)
    wheel = next((tmp_path / "dist").glob("mtp_viz-*.whl"))
    names = set(zipfile.ZipFile(wheel).namelist())
    for f in ("mtp_viz/assets/tiny/target/model.safetensors", "mtp_viz/assets/tiny/drafter/config.json",
              "mtp_viz/assets/prompts.json", "mtp_viz/assets/app.css",
              "mtp_viz/assets/tiny/eval_prompts.json", "mtp_viz/assets/acceptance/published.json"):
        assert f in names, f
    site = tmp_path / "site"
    zipfile.ZipFile(wheel).extractall(site)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    proc = subprocess.run([sys.executable, "-c", "import sys; from mtp_viz.cli.main import main; sys.exit(main())",
                           "generate", "--target", "tiny", "--prompt", "import os", "--max-new-tokens", "6",
                           "--jsonl"], cwd=elsewhere, capture_output=True, text=True, timeout=600,
                          env={"PYTHONPATH": str(site), "PATH": "/usr/bin:/bin", "HF_HUB_OFFLINE": "1"})
    assert proc.returncode == 0, proc.stderr
    events = [json.loads(line) for line in proc.stdout.splitlines()]
    assert events[-1]["type"] == "done" and events[-1]["new_tokens"] == 6
    proc = subprocess.run([sys.executable, "-c", "import mtp_viz.paths as p; print(p.assets_dir())"],
                          cwd=elsewhere, capture_output=True, text=True, env={"PYTHONPATH": str(site)})
    assert proc.stdout.strip().startswith(str(site))


def test_the_package_has_no_import_cycle():
    """No module of mtp_viz imports, through any chain, a module that imports it: every
    import counted, one inside a function or named by a registry's string too
    (``tests/package_imports.py``)."""
    graph = import_graph(ROOT / "mtp_viz")
    found = cycles(graph)
    assert found == [], f"{len(found)} import cycles:\n" + "\n".join(" -> ".join(c + [c[0]]) for c in found)
    assert graph["mtp_viz.engine.theory"] == set()  # pure formulas
    assert "mtp_viz.engine.theory" in graph["mtp_viz.engine.schedules"]
    assert "mtp_viz.notebook" in graph and "mtp_viz.notebook.__init__" not in graph  # a package by its name


PLANTED = {  # a package with four cycles, each one only a checker that does all four can see
    "__init__.py": "from planted.d import y\n",
    "a.py": "def f():\n    from planted import b\n",           # an import inside a function
    "b.py": "import planted.a\n",
    "sub/__init__.py": "from planted.c import x\n",           # a package, named planted.sub
    "c.py": "import planted.sub\nx = 1\n",
    "d.py": "from . import e\ny = 1\nKIND = \"planted\"\n",     # relative imports; a word, not an import
    "e.py": "from .d import y\n",
    "f.py": "RUNNERS = {\"h\": \"planted.sub.h:run\"}\n",        # a registry's string names a module
    "sub/g.py": "from ..a import f\nfrom . import h\n",       # no cycle: planted.a, planted.sub.h
    "sub/h.py": "import planted.f\n",
}


def _plant(folder: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        (folder / "planted" / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / "planted" / name).write_text(text, encoding="utf-8")
    return folder / "planted"


def test_the_cycle_check_catches_a_planted_cycle(tmp_path):
    """Negative control: each planted cycle is reported, and none once it is broken."""
    graph = import_graph(_plant(tmp_path, PLANTED))
    assert graph["planted.sub.g"] == {"planted.a", "planted.sub.h"}
    assert graph["planted.sub"] == {"planted.c"} and graph["planted.d"] == {"planted.e"}
    assert graph["planted"] == {"planted.d"} and graph["planted.f"] == {"planted.sub.h"}
    assert cycles(graph) == [["planted.a", "planted.b"], ["planted.c", "planted.sub"], ["planted.d", "planted.e"],
                             ["planted.f", "planted.sub.h"]]
    broken = {**PLANTED, "b.py": "import os\n", "c.py": "x = 1\n", "e.py": "y = 2\n", "f.py": "RUNNERS = {}\n"}
    assert cycles(import_graph(_plant(tmp_path / "broken", broken))) == []


def test_the_cycle_check_counts_every_circuit_once():
    graph = {"a": {"b", "c"}, "b": {"a", "c"}, "c": {"a"}, "d": {"a"}}  # a-b, a-c, a-b-c
    assert cycles(graph) == [["a", "b"], ["a", "c"], ["a", "b", "c"]]


def test_spaces_installed_changes_nothing_off_zerogpu():
    from mtp_viz.app.page import layout as ui
    from mtp_viz.app.runtime import zerogpu
    assert importlib.util.find_spec("spaces") is not None  # the test extra installs it
    from mtp_viz.sources import local
    assert not zerogpu.zero_gpu() and zerogpu.on_gpu() is local.runs
    assert zerogpu.duration(64) < zerogpu.duration(512) <= zerogpu.MAX_SECONDS
    demo = ui.build_demo(target="tiny")
    assert demo.mtp_app.handlers.runs is local.runs


def test_every_public_name_imports():
    """Each name in ``mtp_viz.__all__`` resolves (``mtp_viz.Servers`` once raised
    AttributeError: its module had moved)."""
    import mtp_viz
    for name in mtp_viz.__all__:
        assert getattr(mtp_viz, name) is not None, name


def _imported_top_levels(package: str) -> set[str]:
    """Every top-level module name ``package``'s source imports, installed or not (an
    optional dependency such as transformers' ``kernels`` is imported only if present)."""
    spec = importlib.util.find_spec(package)
    names: set[str] = set()
    for path in Path(spec.origin).parent.rglob("*.py"):
        text = path.read_text(encoding="utf-8", errors="ignore")
        names.update(re.findall(r"^\s*from\s+([A-Za-z_]\w*)[\w.]*\s+import\s", text, re.M))
        names.update(re.findall(r"^\s*import\s+([A-Za-z_]\w*)[\w.]*\s*(?:$|,|as\s|#)", text, re.M))
        names.update(re.findall(r"""find_spec\(\s*["']([A-Za-z_]\w*)""", text))
    return names


def test_no_test_helper_shadows_an_importable_module():
    """``tests/`` is on sys.path, so a helper named like a module a dependency imports
    hides it: ``tests/kernels.py`` once shadowed the ``kernels`` package transformers
    imports when installed, and CI failed at collection."""
    import importlib.metadata
    taken = set(sys.stdlib_module_names) | set(importlib.metadata.packages_distributions())
    for package in ("transformers", "gradio", "torch", "huggingface_hub"):
        taken |= _imported_top_levels(package)
    helpers = {p.stem for p in (ROOT / "tests").glob("*.py")} - {"conftest"}
    assert helpers and not helpers & taken, sorted(helpers & taken)


def test_no_package_file_over_400_lines_and_no_class_over_200():
    """Modules stay small enough to read in one sitting (the review that split
    ``service.py``, ``hf_generate.py``, ``compiled.py`` and the app's handler found them past it)."""
    import ast
    long, big = [], []
    for path in sorted((ROOT / "mtp_viz").rglob("*.py")):
        text = path.read_text(encoding="utf-8")
        if len(text.splitlines()) > 400:
            long.append(path.relative_to(ROOT).as_posix())
        big += [f"{path.name}:{c.name}" for c in ast.walk(ast.parse(text))
                if isinstance(c, ast.ClassDef) and c.end_lineno - c.lineno + 1 > 200]
    assert not long and not big, (long, big)
