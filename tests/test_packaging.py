"""Deployable as it stands: a wheel carries the bundled pair and runs it from any folder,
requirements.txt matches pyproject.toml, the Space's front matter names the tested
Gradio, the package has no import cycle, and `spaces` changes nothing off ZeroGPU."""
from __future__ import annotations

import ast
import importlib.util
import json
import re
import subprocess
import sys
import zipfile
from pathlib import Path

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


def test_wheel_carries_the_bundled_pair_and_runs_it_from_any_folder(tmp_path):
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation",
                    "-q", "-w", str(tmp_path / "dist"), str(ROOT)], check=True, timeout=600)
    wheel = next((tmp_path / "dist").glob("mtp_viz-*.whl"))
    names = set(zipfile.ZipFile(wheel).namelist())
    for f in ("mtp_viz/assets/tiny/target/model.safetensors", "mtp_viz/assets/tiny/drafter/config.json",
              "mtp_viz/assets/prompts.json", "mtp_viz/assets/app.css",
              "mtp_viz/assets/tiny/eval_prompts.json"):
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


def _imports(path: Path) -> set[str]:
    """Our own modules this file imports (at any depth), as dotted names."""
    pkg = ".".join(path.relative_to(ROOT).with_suffix("").parts)
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = pkg.split(".")[:-node.level] if not path.name == "__init__.py" else \
                    pkg.split(".")[:len(pkg.split(".")) - node.level + 1]
                mod = ".".join(base + ([node.module] if node.module else []))
            else:
                mod = node.module or ""
            if mod.startswith("mtp_viz"):
                out.add(mod)
                out.update(f"{mod}.{a.name}" for a in node.names)
        elif isinstance(node, ast.Import):
            out.update(a.name for a in node.names if a.name.startswith("mtp_viz"))
    return out


def test_the_package_has_no_import_cycle():
    files = {".".join(p.relative_to(ROOT).with_suffix("").parts): p
             for p in (ROOT / "mtp_viz").rglob("*.py")}
    graph = {m: {i for i in _imports(p) if i in files and i != m} for m, p in files.items()}
    state: dict[str, int] = {}

    def visit(m, trail):
        state[m] = 1
        for n in graph[m]:
            assert state.get(n) != 1, "import cycle: " + " -> ".join(trail + [m, n])
            if n not in state:
                visit(n, trail + [m])
        state[m] = 2

    for m in graph:
        if m not in state:
            visit(m, [])
    assert graph["mtp_viz.engine.theory"] == set()  # pure formulas
    assert "mtp_viz.engine.theory" in graph["mtp_viz.engine.schedules"]


def test_spaces_installed_changes_nothing_off_zerogpu():
    from mtp_viz.app.page import layout as ui
    from mtp_viz.app.runtime import zerogpu
    assert importlib.util.find_spec("spaces") is not None  # the test extra installs it
    from mtp_viz.sources import local
    assert not zerogpu.zero_gpu() and zerogpu.on_gpu() is local.runs
    assert zerogpu.duration(64) < zerogpu.duration(512) <= zerogpu.MAX_SECONDS
    demo = ui.build_demo(target="tiny")
    assert demo.mtp_app.handlers.runs is local.runs
