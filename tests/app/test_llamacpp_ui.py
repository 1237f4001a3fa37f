"""The app's server source on real llama-servers, in headless Chromium (marked ``llamacpp``
and ``browser``): the bundled pair exported with `mtp-viz gguf`, one server with its MTP
drafter and one plain. The app loads no model of its own: everything shown came from the
servers."""
from __future__ import annotations

import json

import pytest

from browsing import new_page
from mtp_viz.paths import assets_dir
from mtp_viz.sources.llamacpp.gguf import export_pair
from real_llamacpp import greedy, llama_server, serving
from serving import serve_modelless

pytestmark = [pytest.mark.llamacpp, pytest.mark.browser]
MAX_NEW = 32
MTP = ("--spec-type", "draft-mtp", "--spec-draft-n-max", "4", "-td", "1", "-tbd", "1", "--metrics")
PROMPT = json.loads((assets_dir() / "tiny" / "eval_prompts.json").read_text())["prompts"][0]["prompt"]


@pytest.fixture(scope="module")
def servers(tmp_path_factory):
    llama_server()
    pair = export_pair("tiny", None, tmp_path_factory.mktemp("tiny-gguf"), "f32")
    assert pair.notes == []   # the bundled drafter is shaped as llama.cpp's loader wants
    with serving(pair.target, "-md", str(pair.drafter), *MTP) as spec, serving(pair.target, "--metrics") as plain:
        yield spec, plain


@pytest.fixture(scope="module")
def app():
    demo, url = serve_modelless()
    yield url
    demo.close()


def test_the_app_shows_the_llamacpp_servers_tokens_and_rejection_counts(app, browser, servers):
    spec, plain = servers
    page = new_page(browser)
    page.goto(app)
    page.wait_for_selector("#model-status:has-text('no model')", timeout=60_000)
    page.click("#model input")
    page.get_by_role("option", name="vLLM or llama.cpp server (enter its URL)").click()
    page.wait_for_selector("#vllm-url textarea, #vllm-url input", state="visible")
    page.locator("#vllm-url").get_by_role("textbox").fill(spec)
    page.locator("#vllm-baseline-url").get_by_role("textbox").fill(plain)
    page.fill("#prompt textarea", PROMPT)
    slider = page.locator("#max-new input[type='number']")
    slider.fill(str(MAX_NEW))
    slider.blur()
    page.click("#load")
    page.wait_for_selector("#model-status:has-text('Ready')", timeout=60_000)
    assert "(llama.cpp) speculates" in page.inner_text("#model-status")
    page.click("#run")
    page.wait_for_selector("#status:has-text('Done: llama.cpp kept')", timeout=300_000)

    tokens = greedy(spec, _server_ids(spec), MAX_NEW)["tokens"]
    spans = page.locator("#spec-output span.tok")
    assert spans.count() == len(tokens)
    kinds = set(spans.evaluate_all("els => els.map(e => e.dataset.kind)"))
    assert kinds <= {"accepted", "bonus"} and "accepted" in kinds
    assert page.locator("#ar-output span.tok[data-kind='token']").count() == len(tokens)
    assert "token-identical" in page.inner_text("#compare")
    assert page.locator("#compare").get_attribute("data-engine") == "llamacpp"
    page.close()


def _server_ids(url: str) -> list[int]:
    from real_llamacpp import call
    return call(url, "/tokenize", {"content": PROMPT, "add_special": True})["tokens"]
