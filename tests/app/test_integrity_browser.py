"""Integrity under load, in a served app: the pair a visitor loaded is the pair that runs,
and loading holds no other visitor (that a cold compile holds none either is checked in
test_compile_browser.py, beside the one cold compile it makes).

Before ``engine.build``, two visitors pressing Load at once (bfloat16 and float16) in a
locked-down app got pairs in the wrong precision in 2 of 3 trials, the default pair was
reloaded corrupted, and every greedy ``/generate`` wrote garbage while the status still
said float32. Before the engine's line (``Handlers.engine``), a run waited for its pair's
load and compile inside the model's queue slot: a plain ``/generate`` waited 318 s behind
a cold compile.
"""
from __future__ import annotations

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer  # noqa: F401  before any app imports it on a thread

from browsing import ARGS, CHROMIUM, new_page, open_settings
from serving import generate_ids, serve, transformers_greedy

pytestmark = pytest.mark.browser

PROMPT = "def add(a, b):\n    return"
N = 24


def pick(page, field: str, value: str) -> None:
    page.click(f"#{field} input")
    page.locator(f"#{field}").get_by_role("option", name=value, exact=True).click()


@pytest.fixture(scope="module")
def locked(tmp_path_factory):
    """The app locked down to the bundled pair, offering bfloat16 and float16."""
    import os

    from mtp_viz.app.page import layout as ui
    saved = {k: os.environ.get(k) for k in ("MTP_VIZ_ALLOWED_MODELS", "MTP_VIZ_PRECISIONS", "MTP_VIZ_MAX_PAIRS")}
    os.environ.update(MTP_VIZ_ALLOWED_MODELS="tiny", MTP_VIZ_PRECISIONS="bfloat16,float16", MTP_VIZ_MAX_PAIRS="3")
    try:
        demo = ui.build_demo(target="tiny")
        url = serve(demo)
        yield demo, url
        demo.close()
    finally:
        for k, v in saved.items():
            os.environ.pop(k, None) if v is None else os.environ.__setitem__(k, v)


def test_two_visitors_pressing_load_at_once_each_get_their_precision_and_the_default_stays_whole(locked):
    from playwright import sync_api
    demo, url = locked
    reference = transformers_greedy(PROMPT, N)
    with sync_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        pages = {}
        for precision in ("bfloat16", "float16"):
            page = pages[precision] = new_page(browser)
            page.goto(url)
            page.wait_for_selector("#model-status:has-text('Ready')", timeout=180_000)
            open_settings(page)
            pick(page, "target-precision", precision)
            pick(page, "drafter-precision", precision)
        # both presses in flight before either load ends: the clicks go out back to back
        for page in pages.values():
            page.click("#load")
        for precision, page in pages.items():
            page.wait_for_selector(f"#model-status:has-text('(target {precision}, drafter {precision})')",
                                   timeout=180_000)
        browser.close()
    loader = demo.mtp_app.loader
    for precision in ("bfloat16", "float16"):
        pair = loader.state(_spec(_precision(precision))).pair
        kinds = {p.dtype for m in (pair.target, pair.drafter_model) for p in m.parameters()}
        assert kinds == {getattr(torch, precision)}
    default = loader.state(_spec()).pair
    assert {p.dtype for m in (default.target, default.drafter_model) for p in m.parameters()} == {torch.float32}
    assert torch.get_default_dtype() == torch.float32
    # greedy speculative and plain decoding of the default pair: transformers' own tokens
    assert generate_ids(url, PROMPT, N) == reference
    assert generate_ids(url, PROMPT, N, mode="autoregressive") == reference


def _precision(name: str):
    from mtp_viz.sources.precision import Precision
    return Precision(name, name)


def _spec(precision=None, engine=None):
    """The bundled pair as the loader is asked for it."""
    from mtp_viz.app.runtime.pairs import PairSpec
    return PairSpec.of("tiny", None, precision, engine)


def test_a_link_sets_the_controls_and_loads_nothing(locked):
    """A deep link naming another precision only sets the controls and says where that
    pair stands; nothing loads until the visitor presses Load or Run."""
    from playwright import sync_api
    demo, url = locked
    loader = demo.mtp_app.loader
    before = loader.loaded()
    with sync_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        page = new_page(browser)
        page.goto(url + "?target_precision=float16&drafter_precision=bfloat16")
        page.wait_for_selector("#model-status:has-text('loads on first run')", timeout=120_000)
        assert "float16/bfloat16" in page.inner_text("#model-status")
        browser.close()
    assert loader.state(_spec(_precision_pair("float16", "bfloat16"))).status == "idle"
    assert loader.loaded() == before


def _precision_pair(t: str, d: str):
    from mtp_viz.sources.precision import Precision
    return Precision(t, d)


def test_locked_down_the_compiled_engine_and_other_precisions_are_refused(locked):
    """Lock-down fixes what may be built: precisions it does not list and the compiled
    engine (off unless MTP_VIZ_COMPILE=1) are one sentence, in the page's handlers and for
    a forged page call alike."""
    from mtp_viz.errors import UserError
    demo, _ = locked
    h = demo.mtp_app.handlers
    with pytest.raises(UserError, match="does not offer the int8 precision"):
        h.gate.asked("tiny", "", "", "int8", "default", "eager")
    with pytest.raises(UserError, match="does not offer the compiled engine"):
        h.gate.asked("tiny", "", "", "default", "default", "compiled")
    with pytest.raises(UserError, match="does not offer the compiled engine"):
        demo.mtp_app.loader.start(_spec(engine="compiled"))
    assert h.gate.asked("tiny", "", "", "bfloat16", "float16", "eager") == _spec(_precision_pair("bfloat16", "float16"))
    assert h.gate.asked("tiny", "", "", "bfloat16", "float16") == _spec(_precision_pair("bfloat16", "float16"))


def test_a_forged_choice_is_named_not_echoed():
    """Gradio's own dropdown answered an off-list value with the whole value (100,000
    characters in, 100,000 out); the page's names the field only."""
    import gradio as gr

    from mtp_viz.app.page.controls import Dropdown
    box = Dropdown([("default", "default"), ("float32", "float32")], value="default", label="Target precision")
    assert type(box) is gr.Dropdown
    with pytest.raises(gr.Error) as e:
        box.preprocess("x" * 100_000)
    assert str(e.value.message) == "Target precision: that value is not one of its choices."
    assert box.preprocess("float32") == "float32"
