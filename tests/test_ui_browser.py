"""The app end to end in real headless Chromium (Debian's /usr/bin/chromium driven by
playwright; never ``playwright install``).

One server for the whole module, with a small random Gemma 4 pair saved to a folder
(or the bundled tiny pair when assets/tiny holds one). Set ``MTP_VIZ_SCREENSHOT=1`` to
write docs/screenshot.png (or ``MTP_VIZ_SCREENSHOT=path.png``); otherwise the
screenshot goes to a temporary folder.
"""
from __future__ import annotations

import os
import socket
import sys
from collections import Counter
from pathlib import Path

import pytest

from mtp_viz.presets import assets_dir

pytestmark = pytest.mark.browser

ROOT = Path(__file__).resolve().parent.parent
CHROMIUM = "/usr/bin/chromium"
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync"]
os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")
for var in ("NO_PROXY", "no_proxy"):
    os.environ[var] = ",".join(filter(None, [os.environ.get(var), "127.0.0.1,localhost"]))

# A repetitive prompt: prompt lookup finds n-grams to draft from, and the random target
# below settles into repeating itself, so drafts get accepted as well as rejected.
RANDOM_PROMPT = "w10 w11 w12 w13 w10 w11 w12 w13 w10 w11 w12 w13"
TINY_PROMPT = "def fibonacci(n):\n    \"\"\"Return the n-th Fibonacci number.\"\"\"\n"


def _bundled_tiny() -> bool:
    return all((assets_dir() / "tiny" / sub / "config.json").exists() for sub in ("target", "drafter"))


def _random_pair(folder: Path) -> tuple[str, str]:
    """Random Gemma 4 target + MTP assistant with a word-level tokenizer, saved to disk.

    The target's attention and MLP outputs are zeroed, so its residual stream is the
    token embedding and greedy decoding soon repeats a token: deterministic loops that
    prompt lookup can draft."""
    import torch
    sys.path.insert(0, str(ROOT / "tests"))
    import factories

    target, drafter, tok = factories.gemma_target(), factories.gemma_assistant(), factories.word_tokenizer()
    with torch.no_grad():
        for name, p in target.named_parameters():
            if name.endswith(("o_proj.weight", "down_proj.weight")):
                p.zero_()
    tok.chat_template = "{% for m in messages %}{{ m['content'] }} {% endfor %}"
    for model, sub in ((target, "target"), (drafter, "drafter")):
        model.save_pretrained(folder / sub)
        tok.save_pretrained(folder / sub)
    return str(folder / "target"), str(folder / "drafter")


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    """(target, drafter, prompt, drafter kind) for the app under test."""
    if _bundled_tiny():
        return "tiny", None, TINY_PROMPT, "mtp"
    t, d = _random_pair(tmp_path_factory.mktemp("pair"))
    return t, d, RANDOM_PROMPT, "lookup"


@pytest.fixture(scope="module")
def server(pair):
    from mtp_viz import ui

    demo = ui.build_demo(target=pair[0], drafter=pair[1])
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ui.launch(demo, host="127.0.0.1", port=port, prevent_thread_lock=True, quiet=True,
              share=False, ssr_mode=False)
    yield demo, f"http://127.0.0.1:{port}/"
    demo.close()


@pytest.fixture(scope="module")
def browser():
    if not Path(CHROMIUM).exists():
        message = "needs Debian's chromium (apt-get install chromium fonts-dejavu-core)"
        if os.environ.get("CI"):  # CI installs it: a missing browser is a failure there
            pytest.fail(message)
        pytest.skip(message)
    from playwright import sync_api
    with sync_api.sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        yield b
        b.close()


@pytest.fixture
def page(browser, server):
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    page.goto(server[1])
    page.wait_for_selector("#model-status:has-text('Ready')", timeout=180_000)
    yield page
    page.close()


def _screenshot_path(tmp_path: Path) -> Path:
    want = os.environ.get("MTP_VIZ_SCREENSHOT", "")
    if not want:
        return tmp_path / "screenshot.png"
    return ROOT / "docs" / "screenshot.png" if want.lower() in ("1", "true", "yes") else Path(want)


def _expected_kinds(demo, pair) -> tuple[Counter, int]:
    """Token kinds the same greedy generation yields, straight from the engine."""
    st = demo.mtp_loader.state(pair[0], pair[1])
    events = list(st.pair.generate(pair[2], mode="speculative", drafter=pair[3], max_new_tokens=64,
                                   draft_tokens=4, schedule="constant", temperature=0.0, chat=True))
    kinds = Counter(e.type if e.type != "bonus" else f"bonus-{e.kind}" for e in events)
    return kinds, sum(e.type == "token" for e in st.pair.generate(
        pair[2], mode="autoregressive", max_new_tokens=64, temperature=0.0, chat=True))


def test_run_fills_both_panes_and_charts(page, server, pair, tmp_path):
    demo, _ = server
    page.fill("#prompt textarea", pair[2])
    page.locator("#drafter-kind label", has_text="Prompt lookup" if pair[3] == "lookup" else "MTP").click()
    page.click("#run")
    page.wait_for_selector("#status:has-text('Done')", timeout=180_000)

    expected, ar_tokens = _expected_kinds(demo, pair)
    spec = page.locator("#spec-output span.tok")
    shown = Counter(k if k != "bonus" else f"bonus-{b}" for k, b in
                    spec.evaluate_all("els => els.map(e => [e.dataset.kind, e.dataset.bonus || ''])"))
    for kind in ("accepted", "rejected", "bonus-correction", "bonus-extension"):
        assert shown[kind] == expected[kind], (kind, shown, expected)
    assert shown["accepted"] > 0 and shown["drafted"] == 0   # nothing left pending
    assert page.locator("#ar-output span.tok[data-kind='token']").count() == ar_tokens > 0
    assert page.locator("#ar-output span.tok:not([data-kind='token'])").count() == 0
    assert page.locator("#spec-output img, #ar-output img").count() == 0
    # speedup and identity badges (whether outputs match is the engine's business, tested there)
    page.wait_for_selector("#compare .mv-badge >> nth=1")
    assert "identical" in page.inner_text("#compare") or "differ" in page.inner_text("#compare")

    for plot in ("acceptance-plot", "draft-length-plot"):
        page.wait_for_selector(f"#{plot} .js-plotly-plot g.trace", state="attached", timeout=30_000)
    assert "tokens/s" in page.inner_text("#spec-stats") and "target forwards" in page.inner_text("#ar-stats")

    out = _screenshot_path(tmp_path)
    out.parent.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(out), full_page=True)
    assert out.stat().st_size > 10_000


def test_race_replay_plays_both_runs(page):
    page.click("#run")
    page.wait_for_selector("#status:has-text('Done')", timeout=180_000)
    page.click("#replay")
    page.wait_for_selector("#status:has-text('Replay done')", timeout=180_000)
    assert page.locator("#spec-output span.tok").count() > 0
    assert page.locator("#ar-output span.tok").count() > 0


def test_user_errors_are_one_visible_sentence(page):
    page.fill("#prompt textarea", "   ")
    page.click("#run")
    page.wait_for_selector("#status .mv-msg-error:has-text('Type a prompt first')")
    page.fill("#prompt textarea", "w10 w11")
    page.click("#run")                                     # the app keeps serving
    page.wait_for_selector("#status:has-text('Done')", timeout=180_000)


def test_stop_ends_the_run_early(page):
    page.locator("#max-new input[type='number']").fill("512")
    page.locator("#max-new input[type='number']").press("Enter")
    page.click("#run")
    page.wait_for_selector("#spec-output span.tok", timeout=180_000)
    page.locator("#stop").dispatch_event("click")  # no scrolling: the page is busy streaming
    page.wait_for_selector("#status:has-text('Stopped')", timeout=180_000)
    assert page.locator("#ar-output span.tok").count() == 0  # the baseline never started
    assert "stopped" in page.inner_text("#spec-stats")
