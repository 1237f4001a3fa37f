"""The token inspector and the anatomy panel in headless Chromium, on the bundled pair.

Set ``MTP_VIZ_SCREENSHOT=1`` to write the README's screenshots (docs/inspector.png,
docs/anatomy.png) at 1280 pixels wide.
"""
from __future__ import annotations

import os
from pathlib import Path

import pytest

from browsing import PROMPT, open_app, open_settings, open_tab
from locations import ROOT

pytestmark = pytest.mark.browser


@pytest.fixture(scope="module")
def page(browser, server):  # one page for the module's tests
    page = open_app(browser, server[1])
    yield page
    page.close()


def _shot(tmp_path: Path, name: str) -> Path:
    want = os.environ.get("MTP_VIZ_SCREENSHOT", "").lower() in ("1", "true", "yes")
    return ROOT / "docs" / name if want else tmp_path / name


def _pair(demo):
    from mtp_viz.app.runtime.pairs import PairSpec
    return demo.mtp_app.loader.state(PairSpec("tiny")).pair


def test_clicking_a_rejected_draft_shows_p_q_and_the_acceptance_probability(page, server, tmp_path):
    page.fill("#prompt textarea", PROMPT)
    page.click("#run")
    page.wait_for_selector("#status:has-text('Done')", timeout=180_000)
    tok = page.locator("#spec-output span.tok[data-kind='rejected']").first
    step, index = int(tok.get_attribute("data-step")), int(tok.get_attribute("data-index"))
    tok.click()
    page.wait_for_selector(f"#inspector .mv-inspector[data-step='{step}'][data-index='{index}'] [data-p]",
                           timeout=30_000)
    p_rows = page.locator("#inspector tr[data-p]")
    q_rows = page.locator("#inspector tr[data-q]")
    assert p_rows.count() >= 5 and q_rows.count() >= 5
    assert all(t.strip() for t in p_rows.locator("td.mv-cand").all_inner_texts())  # each with its text
    box = page.locator("#inspector [data-acceptance]")
    p, q, a = (float(box.get_attribute(k)) for k in ("data-p-token", "data-q-token", "data-acceptance"))
    assert a == pytest.approx(min(1.0, p / q), abs=1e-5)
    assert f"{a:.3f}" in box.inner_text()
    assert page.locator("#inspector [data-verdict='rejected']").count() == 1

    # the same greedy generation straight from the engine: the panel shows its numbers
    events = list(_pair(server[0]).generate(PROMPT, mode="speculative", drafter="mtp", max_new_tokens=64,
                                            draft_tokens=4, schedule="constant", chat=False, top=5))
    e = next(x for x in events if x.type == "rejected" and x.step == step and x.index == index)
    d = next(x for x in events if x.type == "drafted" and x.step == step and x.index == index)
    assert (p, q) == (pytest.approx(e.p, abs=1e-5), pytest.approx(e.q, abs=1e-5))
    shown = p_rows.evaluate_all("rs => rs.map(r => [Number(r.dataset.tokenId), Number(r.dataset.p)])")
    assert [t for t, _ in shown] == list(e.p_top_ids)
    assert [v for _, v in shown] == pytest.approx(list(e.p_top), abs=1e-5)
    assert q_rows.evaluate_all("rs => rs.map(r => Number(r.dataset.tokenId))") == list(d.q_top_ids)
    page.evaluate("window.scrollTo(0, 0)")
    page.screenshot(path=str(_shot(tmp_path, "inspector.png")))

    # an autoregressive token: the target's candidates only
    page.locator("#ar-output span.tok[data-kind='token']").nth(3).click()
    page.wait_for_selector("#inspector .mv-inspector[data-kind='token'] [data-p]", timeout=30_000)
    assert page.locator("#inspector tr[data-p]").count() >= 5
    assert page.locator("#inspector tr[data-q]").count() == 0
    page.click("#inspector .mv-close")
    page.wait_for_selector("#inspector .mv-inspector", state="detached", timeout=10_000)

    # a new run closes a token of the old one
    page.locator("#ar-output span.tok[data-kind='token']").nth(2).click()
    page.wait_for_selector("#inspector .mv-inspector", timeout=30_000)
    page.click("#run")
    page.wait_for_selector("#inspector .mv-inspector", state="detached", timeout=30_000)
    page.wait_for_selector("#compare[data-speedup]", timeout=180_000)  # the run ends before the next test

    # so does a race replay of the run (it redraws the panes the token was picked in)
    page.wait_for_selector("#status:has-text('Done')", timeout=180_000)
    page.locator("#spec-output span.tok[data-step]").nth(1).click()
    page.wait_for_selector("#inspector .mv-inspector", timeout=30_000)
    page.click("#replay")
    page.wait_for_selector("#inspector .mv-inspector", state="detached", timeout=30_000)
    page.click("#stop")


def test_the_anatomy_panel_shows_the_loaded_pairs_layers_and_width(page, server, tmp_path):
    panel = page.locator("#anatomy .mv-anatomy[data-target-layers]")
    panel.wait_for(state="attached", timeout=60_000)
    pair = _pair(server[0])
    t, d = pair.target.config, pair.drafter_model.config.get_text_config()
    assert int(panel.get_attribute("data-target-layers")) == t.num_hidden_layers == 24
    assert int(panel.get_attribute("data-target-width")) == t.hidden_size
    assert int(panel.get_attribute("data-drafter-layers")) == d.num_hidden_layers
    assert int(panel.get_attribute("data-drafter-width")) == d.hidden_size
    text = panel.inner_text()
    assert f"{t.num_hidden_layers} layers × width {t.hidden_size}" in text
    assert f"{d.num_hidden_layers} drafter layer" in text and "no clustered head" in text
    assert f"{2 * t.hidden_size} → {d.hidden_size}" in text  # the projection of the concatenated input
    open_tab(page, "inside")                 # the anatomy's tab
    panel.scroll_into_view_if_needed()
    panel.screenshot(path=str(_shot(tmp_path, "anatomy.png")))


def test_a_first_rejection_under_sampling_shows_the_residual(page):
    page.reload()  # a fresh session: no earlier run's "Done" in #status
    page.wait_for_selector("#model-status:has-text('Ready')", timeout=180_000)
    open_settings(page)
    page.locator("#decoding").get_by_text("sampling").click()
    page.fill("#prompt textarea", PROMPT)
    page.click("#run")
    page.wait_for_selector("#status:has-text('Done')", timeout=180_000)
    spans = page.locator("#spec-output span.tok[data-kind='rejected']").evaluate_all(
        "els => els.map(e => [Number(e.dataset.step), Number(e.dataset.index)])")
    first = {}
    for step, index in spans:
        first[step] = min(index, first.get(step, index))
    assert first, "no rejection to inspect"
    step, index = min(first.items())
    page.locator(f"#spec-output span.tok[data-kind='rejected'][data-step='{step}'][data-index='{index}']").click()
    page.wait_for_selector(f"#inspector .mv-inspector[data-step='{step}'][data-index='{index}'] [data-residual]",
                           timeout=30_000)
    assert page.locator("#inspector tr[data-residual]").count() >= 5
    # a draft rejected by the test had a chance below one: the draw fell at or above it
    assert float(page.locator("#inspector [data-acceptance]").get_attribute("data-acceptance")) < 1.0
    assert "the correction was drawn from the residual" in page.inner_text("#inspector")
