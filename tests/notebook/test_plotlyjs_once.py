"""plotly.js once per notebook, not once per run: two ``mtp_viz.show`` cells on a real
Jupyter kernel, their outputs measured in the saved .ipynb; the nbconvert page of the
result opened in headless Chromium, drawing its charts with plotly.js from plotly's CDN
(served here from the installed plotly, requested once), from ``embed_plotlyjs()``
offline, or saying why it cannot."""
from __future__ import annotations

import json

import pytest

from notebook_kernel import TINY_PAIR, code_cell, execute

pytestmark = pytest.mark.slow  # real kernels and a browser

SHOW = "events = mtp_viz.show(pair, {prompt!r}, max_new_tokens=64, chat=False)"
EACH, BOTH = 500_000, 1_000_000   # bytes of one show() cell's outputs, of two together
PLOTLYJS = 4_000_000              # plotly.js is 4.8 MB: an output this large carries it


def _notebook(*first: str):
    import nbformat
    return nbformat.v4.new_notebook(cells=[code_cell(TINY_PAIR), *map(code_cell, first),
                                           code_cell(SHOW.format(prompt="def parse(line):\n")),
                                           code_cell(SHOW.format(prompt="import os\n"))])


def _saved_sizes(nb, path) -> list[int]:
    """Each cell's outputs as the saved .ipynb holds them, in bytes."""
    import nbformat
    nbformat.write(nb, path)
    saved = json.loads(path.read_text(encoding="utf-8"))
    return [len(json.dumps(c.get("outputs", []), ensure_ascii=False).encode()) for c in saved["cells"]]


@pytest.fixture(scope="module")
def two_shows(tmp_path_factory):
    folder = tmp_path_factory.mktemp("two-shows")
    return execute(_notebook(), folder), folder


@pytest.fixture(scope="module")
def embedded(tmp_path_factory):
    folder = tmp_path_factory.mktemp("embedded")
    return execute(_notebook("mtp_viz.notebook.embed_plotlyjs()"), folder), folder


def test_two_show_cells_save_under_a_megabyte_with_plotlys_mime_bundle(two_shows):
    nb, folder = two_shows
    sizes = _saved_sizes(nb, folder / "saved.ipynb")
    shows = sizes[-2:]
    print(f"saved outputs of the two show() cells: {shows} bytes")
    assert all(0 < s <= EACH for s in shows) and sum(shows) <= BOTH
    for cell in nb.cells[-2:]:
        figures = [o for o in cell.outputs if "application/vnd.plotly.v1+json" in o.get("data", {})]
        assert len(figures) >= 5 and all("text/html" in o.data for o in figures)  # and its small fallback
        assert sum(bool(o.data["application/vnd.plotly.v1+json"]["data"]) for o in figures) >= 5  # with traces


def test_embed_plotlyjs_puts_plotlyjs_in_once(embedded):
    nb, folder = embedded
    sizes = _saved_sizes(nb, folder / "saved.ipynb")
    assert sizes[1] > PLOTLYJS and all(s <= EACH for s in sizes[2:])
    assert sum(nb.cells[1].outputs[0].data["text/html"].count(m) for m in ("Copyright", "plotly.js v")) >= 2


def _page(nb, tmp_path):
    from nbconvert import HTMLExporter
    page_html, _ = HTMLExporter().from_notebook_node(nb)
    path = tmp_path / "notebook.html"
    path.write_text(page_html, encoding="utf-8")
    return path


def _charts_drawn(page, n: int) -> None:
    """Wait until plotly drew every chart of the page (it marks each div it drew), ``n`` at least."""
    page.wait_for_function("n => { const d = [...document.querySelectorAll('.mv-nb-chart')]; return d.length >= n "
                           "&& d.every(e => e.classList.contains('js-plotly-plot') && e.querySelector('.main-svg')); }",
                           arg=n, timeout=60_000)


def test_the_page_loads_plotlyjs_from_the_cdn_once_for_every_chart(two_shows, browser, tmp_path):
    """Online (plotly's CDN served here from the installed plotly's own file), the
    page's ten charts draw with one request for plotly.js."""
    from plotly.offline import get_plotlyjs, get_plotlyjs_version
    nb, _ = two_shows
    asked = []

    def cdn(route):
        asked.append(route.request.url)
        route.fulfill(status=200, content_type="application/javascript", body=get_plotlyjs())

    page = browser.new_page()
    page.route("http*://**", lambda route: route.abort())
    page.route(f"https://cdn.plot.ly/plotly-{get_plotlyjs_version()}.min.js", cdn)
    try:
        page.goto(_page(nb, tmp_path).as_uri())
        _charts_drawn(page, 10)
        assert len(asked) == 1
    finally:
        page.close()


def test_offline_the_page_says_why_a_chart_is_missing(two_shows, browser, tmp_path):
    from mtp_viz.views.notebook import NO_PLOTLYJS
    nb, _ = two_shows
    page = browser.new_page()
    page.route("http*://**", lambda route: route.abort())
    try:
        page.goto(_page(nb, tmp_path).as_uri())
        said = page.locator(".mv-nb-chart", has_text="embed_plotlyjs()")
        page.wait_for_function("n => document.querySelectorAll('.mv-nb-chart').length === n && "
                               "[...document.querySelectorAll('.mv-nb-chart')].every(d => d.textContent)",
                               arg=page.locator(".mv-nb-chart").count(), timeout=60_000)
        assert said.count() == page.locator(".mv-nb-chart").count() >= 10
        assert said.first.inner_text() == NO_PLOTLYJS
    finally:
        page.close()


def test_offline_with_embed_plotlyjs_the_page_draws_every_chart(embedded, browser, tmp_path):
    nb, _ = embedded
    page = browser.new_page()
    page.route("http*://**", lambda route: route.abort())
    try:
        page.goto(_page(nb, tmp_path).as_uri())
        _charts_drawn(page, 10)
    finally:
        page.close()
