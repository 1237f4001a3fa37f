"""``mtp_viz.launch(pair)`` on a pair already in memory: the page opens on it ready, by
its models' names (never a folder path), with a code model's code prompts; and a script
that closes it at any moment (at once, mid-run, while another pair loads) exits 0."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap

import pytest

import serving  # noqa: F401 - its import exempts the loopback address from any proxy
from browsing import new_page, open_settings
from locations import ROOT
from mtp_viz.app.runtime.pairs import PairSpec
from real_llamacpp import free_port

pytestmark = pytest.mark.slow  # real models, served apps and subprocesses

SCRIPT = textwrap.dedent("""
    import sys, threading, time
    import torch, mtp_viz
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from mtp_viz.app.runtime.pairs import PairSpec
    from mtp_viz.sources.presets import resolve
    TARGET, ASSISTANT = resolve("tiny")
    pair = mtp_viz.from_models(AutoModelForCausalLM.from_pretrained(TARGET),
                               AutoModelForCausalLM.from_pretrained(ASSISTANT), AutoTokenizer.from_pretrained(TARGET))
    port = int(sys.argv[2])
    demo = mtp_viz.launch(pair, port=port)
    moment = sys.argv[1]
    if moment == "mid-run":  # a client's /generate streams when the app closes
        from gradio_client import Client
        job = Client(f"http://127.0.0.1:{port}/", verbose=False).submit(
            prompt="def parse(line):", max_new_tokens=512, chat=False, api_name="/generate")
        while len(job.outputs()) < 3 or not job.outputs()[-1]:
            assert not job.done(), job.outputs()  # the run must still be going when the app closes
            time.sleep(0.05)
    elif moment == "mid-load":  # another pair (the target alone, prompt lookup) loads and warms
        demo.mtp_app.loader.start(PairSpec(TARGET))
        while demo.mtp_app.loader.state(PairSpec(TARGET)).status != "loading":
            time.sleep(0.01)
    demo.close()
    print("closed", moment, flush=True)
""")


@pytest.mark.parametrize("moment", ["at-once", "mid-run", "mid-load"])
def test_a_script_that_closes_launch_at_any_moment_exits_cleanly(moment, tmp_path):
    """Before, each of these died with "terminate called without an active exception"
    (code 134): a thread still inside torch when the interpreter finalized."""
    script = tmp_path / "closes.py"
    script.write_text(SCRIPT, encoding="utf-8")
    env = {"PYTHONPATH": str(ROOT), "GRADIO_ANALYTICS_ENABLED": "False", "HF_HUB_OFFLINE": "1",
           "NO_PROXY": "127.0.0.1,localhost", "no_proxy": "127.0.0.1,localhost", "MTP_VIZ_THREADS": "1"}
    for attempt in range(3):
        done = subprocess.run([sys.executable, str(script), moment, str(free_port())], capture_output=True,
                              text=True, timeout=600, env={**os.environ, **env}, cwd=tmp_path)
        assert f"closed {moment}" in done.stdout, done.stderr[-3000:]
        assert done.returncode == 0 and "terminate called" not in done.stderr, (attempt, done.stderr[-3000:])


@pytest.fixture(scope="module")
def tiny_in_memory():
    from transformers import AutoModelForCausalLM, AutoTokenizer

    import mtp_viz
    from mtp_viz.sources.presets import resolve
    target, assistant = resolve("tiny")
    return mtp_viz.from_models(AutoModelForCausalLM.from_pretrained(target),
                               AutoModelForCausalLM.from_pretrained(assistant), AutoTokenizer.from_pretrained(target))


def test_launch_opens_ready_on_the_bundled_pair_by_name_with_a_code_prompt(tiny_in_memory, browser, monkeypatch):
    """No "Loading …": the pair is ready before the page opens; the picker shows the
    bundled pair's name, not its folders; its first prompt is code, the chat template off.
    torch's threads are the app's (a notebook's torch has every core), as every surface times."""
    import torch

    import mtp_viz
    from mtp_viz.prompts import code_suite, load_prompts
    from mtp_viz.sources.presets import resolve
    port = free_port()
    monkeypatch.setenv("MTP_VIZ_THREADS", "1")
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    demo = mtp_viz.launch(tiny_in_memory, port=port)
    try:
        assert torch.get_num_threads() == 1
        app = demo.mtp_app
        assert app.loader.state(PairSpec(*app.default)).status == "ready" and app.default == ("tiny", None)
        page = new_page(browser)
        seen = []
        page.expose_function("seen", lambda text: seen.append(text))
        page.add_init_script("""new MutationObserver(() => { const s = document.querySelector('#model-status');
            if (s) window.seen(s.innerText); }).observe(document, {subtree: true, childList: true,
            characterData: true});""")
        page.goto(f"http://127.0.0.1:{port}/")
        page.wait_for_selector("#model-status:has-text('Ready: the bundled tiny pair')", timeout=120_000)
        assert not [s for s in seen if "Loading" in s], seen
        assert page.locator("#model input").input_value() == "Bundled tiny pair (offline, CPU)"
        assert page.locator("#prompt textarea").input_value() == load_prompts(code_suite())[0].text
        open_settings(page)
        assert not page.locator("#chat input").is_checked()
        folders = resolve("tiny")
        assert not [f for f in folders if f in page.content()]  # the machine's paths (anatomy, picker, hint)
        page.close()
    finally:
        demo.close()
        torch.set_num_threads(before)


def test_a_pair_no_preset_names_is_shown_by_its_folders_names(tmp_path):
    """A reader's own folders: the picker entry and the status line name them by their
    own names; no path of the machine reaches the page."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    import mtp_viz
    from mtp_viz.app.runtime import deploy
    from mtp_viz.sources.presets import resolve
    target, assistant = resolve("tiny")
    shutil.copytree(target, tmp_path / "my-coder")
    shutil.copytree(assistant, tmp_path / "my-coder-assistant")
    pair = mtp_viz.from_models(AutoModelForCausalLM.from_pretrained(tmp_path / "my-coder"),
                               AutoModelForCausalLM.from_pretrained(tmp_path / "my-coder-assistant"),
                               AutoTokenizer.from_pretrained(tmp_path / "my-coder"))
    port = free_port()
    demo = mtp_viz.launch(pair, port=port)
    try:
        h = demo.mtp_app.handlers
        assert demo.mtp_app.default == (pair.name, pair.drafter_name)
        assert h.presets[deploy.IN_MEMORY]["label"] == "my-coder + my-coder-assistant (in memory)"
        line = h.gate.model_line(PairSpec(pair.name, pair.drafter_name))
        assert h.gate.model_line(PairSpec(*h.gate.pick(deploy.IN_MEMORY))) == line
        assert "Ready: my-coder + my-coder-assistant (target float32" in line
        import urllib.request
        config = urllib.request.urlopen(f"http://127.0.0.1:{port}/config", timeout=60).read().decode()
        assert "my-coder + my-coder-assistant (in memory)" in config and str(tmp_path) not in config
    finally:
        demo.close()
