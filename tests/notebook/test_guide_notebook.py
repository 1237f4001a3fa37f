"""The repository's notebook (``notebooks/gemma4_mtp.ipynb``), as a reader runs it: every
cell on a real Jupyter kernel, offline on the bundled pair; its outputs checked; its
nbconvert page opened in headless Chromium; and the committed file kept output-free."""
from __future__ import annotations

import json
import re

import pytest

from locations import ROOT
from notebook_kernel import code_cell, execute, outputs

pytestmark = pytest.mark.slow  # real Jupyter kernels

NOTEBOOK = ROOT / "notebooks" / "gemma4_mtp.ipynb"


def test_the_committed_notebook_has_no_outputs():
    nb = json.loads(NOTEBOOK.read_text(encoding="utf-8"))
    code = [c for c in nb["cells"] if c["cell_type"] == "code"]
    assert code and all(c["outputs"] == [] and c["execution_count"] is None for c in code)


def test_the_one_line_to_change_names_the_bundled_pair_and_offers_e2b():
    source = "".join("".join(c["source"]) for c in json.loads(NOTEBOOK.read_text(encoding="utf-8"))["cells"])
    assert len(re.findall(r'^MODEL = "tiny"  # .*"e2b"', source, re.M)) == 1
    from mtp_viz.sources.presets import resolve
    assert resolve("e2b") == ("google/gemma-4-E2B-it", "google/gemma-4-E2B-it-assistant")


@pytest.fixture(scope="module")
def executed(tmp_path_factory):
    """The notebook as a reader who wants its page to draw offline runs it: with
    ``mtp_viz.notebook.embed_plotlyjs()`` after the import (the install section says so)."""
    import nbformat
    nb = nbformat.read(NOTEBOOK, as_version=4)
    first = next(i for i, c in enumerate(nb.cells) if "import mtp_viz" in c.source)
    nb.cells.insert(first + 1, code_cell("mtp_viz.notebook.embed_plotlyjs()"))
    return execute(nb, NOTEBOOK.parent)


def test_executed_the_notebook_carries_plotlyjs_once(executed, tmp_path):
    """Its saved outputs: plotly.js once (the embed cell's), every run's charts a few KB."""
    import nbformat
    path = tmp_path / "executed.ipynb"
    nbformat.write(executed, path)
    sizes = [len(json.dumps(c.get("outputs", []), ensure_ascii=False).encode())
             for c in json.loads(path.read_text(encoding="utf-8"))["cells"]]
    embed = next(i for i, c in enumerate(executed.cells) if c.source == "mtp_viz.notebook.embed_plotlyjs()")
    print(f"executed notebook: {path.stat().st_size} bytes; without the embed cell {sum(sizes) - sizes[embed]}")
    assert sizes[embed] > 4_000_000 and sum(sizes) - sizes[embed] <= 1_000_000
    assert "mtp_viz.notebook.embed_plotlyjs()" in NOTEBOOK.read_text(encoding="utf-8")  # its install section offers it


def test_every_cell_runs_on_a_real_kernel_and_shows_mtp_viz_views(executed):
    assert outputs(executed, "error") == []
    # nothing a reader cannot act on: torchao's GPU-only libraries, torch's pytree deprecations,
    # tqdm's "IProgress not found" (the notebook extra brings ipywidgets: a load draws a bar)
    stderr = "".join(o.text for o in outputs(executed, "stream") if o.name == "stderr")
    for noise in ("Failed to load", "is an Enum subclass", "TqdmWarning", "IProgress not found"):
        assert noise not in stderr, stderr[:2000]
    printed = "".join(o.text for o in outputs(executed, "stream") if o.name == "stdout")
    assert "same output as the constant schedule: True" in printed
    assert "same tokens: True" in printed
    html = outputs(executed, "text/html")
    assert any("<svg" in h and "mv-anatomy" in h for h in html)  # the pair's anatomy after loading
    runs = [h for h in html if "mv-notebook" in h and "data-step=" in h]
    assert len(runs) >= 3  # transformers' call, its heuristic call, mtp-viz's engine
    assert all(re.search(r'data-kind="(?:accepted|bonus)"[^>]* data-step=', h) for h in runs)
    assert len(outputs(executed, "application/vnd.plotly.v1+json")) >= 15
    side = [h for h in html if 'class="mv-nb-side"' in h]  # transformers' recorded call beside mtp-viz's engine
    assert len(side) == 1 and "transformers generate, heuristic" in side[0] and "mtp-viz engine" in side[0]


def test_a_browser_finds_the_inline_views_token_spans(executed, browser, tmp_path):
    """nbconvert's page of the executed notebook, in headless Chromium, offline: the
    token spans are there, styled by the app's stylesheet (an accepted token has a
    background), and the charts drew (plotly.js in the page once, from embed_plotlyjs())."""
    from nbconvert import HTMLExporter
    page_html, _ = HTMLExporter().from_notebook_node(executed)
    path = tmp_path / "notebook.html"
    path.write_text(page_html, encoding="utf-8")
    page = browser.new_page()
    page.route("http*://**", lambda route: route.abort())  # the reader may be offline: so is this page
    try:
        page.goto(path.as_uri())
        spans = page.locator(".mv-notebook .tok[data-step]")
        spans.first.wait_for(timeout=60_000)
        assert spans.count() > 50
        colour = page.locator('.mv-notebook .tok[data-kind="accepted"][data-step]').first.evaluate(
            "e => getComputedStyle(e).backgroundColor")
        assert colour not in ("rgba(0, 0, 0, 0)", "transparent")
        page.wait_for_function("document.querySelectorAll('.js-plotly-plot .main-svg').length >= 15",
                               timeout=60_000)
    finally:
        page.close()
