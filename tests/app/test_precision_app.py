"""Precision in the app: part of which pair is loaded (the pair cache's key), asked under
More settings, named by the model status and the stats line, carried by links; int4
without a kernel and torchao missing are one sentence each, and the app still starts
without torchao (a real import failure, in a subprocess)."""
from __future__ import annotations

import html
import os
import subprocess
import sys

import pytest

from locations import ROOT
from mtp_viz.app.handlers import form, links, local
from mtp_viz.app.runtime import deploy, loading, service
from mtp_viz.app.runtime.pairs import PairSpec
from mtp_viz.sources.precision import Precision


def _values(**kw):
    v = dict(prompt="def parse(line):\n", model="tiny", custom_target="", custom_drafter="", max_new_tokens=6,
             draft_tokens=3, schedule="constant", drafter_kind="mtp", decoding="greedy", temperature=0.8,
             top_p=0.95, top_k=0, seed=0, chat=False, baseline=True, target_precision="default",
             drafter_precision="default")
    return {**v, **kw}


def _slot(frames, name):
    i = local.OUTPUTS.index(name)
    return [f[i] for f in frames if isinstance(f[i], str)]


def test_the_precision_is_part_of_the_pair_cache_key():
    calls = []

    def load(target, drafter, **asked):
        calls.append((target, asked.get("precision")))
        return object()
    loader = service.PairLoader(load)
    in_int8 = PairSpec("tiny", precision=Precision("int8", "float32"))
    default = loader.wait(PairSpec("tiny"), timeout=5)
    int8 = loader.wait(in_int8, timeout=5)
    assert default.pair is not int8.pair
    assert loader.wait(PairSpec("tiny", precision=Precision()), timeout=5).pair is default.pair  # the default, again
    assert loader.wait(PairSpec.of("tiny", None, Precision("int8", "float32")), timeout=5).pair is int8.pair
    assert calls == [("tiny", None), ("tiny", Precision("int8", "float32"))]  # each loaded once
    assert PairSpec("tiny", precision=Precision("int8")).key != PairSpec("tiny").key
    assert PairSpec.of("tiny", None, None).key == PairSpec("tiny").key   # no precision: the default


@pytest.fixture
def handlers(monkeypatch):
    from mtp_viz.sources import models
    monkeypatch.setattr(models, "set_threads", lambda n: None)   # keep this process's thread count
    monkeypatch.setattr(loading, "warm_up", lambda source, top=0: None)  # the load is what is checked
    loader = service.PairLoader(loading.load_and_warm)
    return local.Handlers(loader, deploy.presets(loader.allow), ("tiny", None), cap=16, prompt_cap=256)


def test_a_run_in_int8_says_what_ran(handlers):
    frames = list(handlers.run(_values(target_precision="int8", drafter_precision="fp32"), None))
    assert "Done." in _slot(frames, "status")[-1]
    assert "target <b>int8</b> · drafter <b>float32</b>" in _slot(frames, "spec_stats")[-1]
    assert "target <b>int8</b></span>" in _slot(frames, "ar_stats")[-1]
    line = handlers.gate.model_line(PairSpec("tiny", precision=Precision("int8", "float32")))
    assert "Ready: the bundled tiny pair (target int8, drafter float32)." in line
    assert "loads on first run" in handlers.gate.model_line(PairSpec("tiny"))  # the default precision: another pair


@pytest.mark.parametrize("asked, sentence", [
    (dict(target_precision="int4"), "int4 has no kernel on this CPU (torchao "),
    (dict(drafter_precision="int3"), "Unknown drafter precision 'int3'; use float32, bfloat16, float16, int8 "
                                     "or int4."),
    (dict(target_precision=7), "The target precision must be a text, not 7."),
])
def test_a_precision_that_cannot_run_is_one_sentence(handlers, asked, sentence):
    status = _slot(list(handlers.run(_values(**asked), None)), "status")
    assert html.escape(sentence) in status[-1] and "mv-msg-error" in status[-1]
    line, *_ = handlers.gate.load("tiny", "", "", asked.get("target_precision"), asked.get("drafter_precision"))
    if "has no kernel" in sentence:  # Load tries again, in the background, and ends on the same sentence
        precision = form.precision_of(asked.get("target_precision"), asked.get("drafter_precision"))
        assert handlers.loader.wait(PairSpec("tiny", precision=precision), timeout=60).status == "error"
        line = handlers.gate.model_line(PairSpec("tiny", precision=precision))
    assert html.escape(sentence) in line


def test_links_carry_the_precisions():
    limits = links.Limits(("tiny",), 64, 1000)
    link = links.parse({"target_precision": "int8", "drafter_precision": "nf4"}, limits)
    assert link.values == {"target_precision": "int8"}
    assert link.problems == ["drafter_precision (must be one of float32, bfloat16, float16, int8, int4)"]
    q = links.query({"prompt": "hi", "model": "tiny", "decoding": "greedy", "target_precision": "bfloat16",
                     "drafter_precision": "default"}, limits)
    assert "target_precision=bfloat16" in q and "drafter_precision" not in q


WITHOUT_TORCHAO = """
import sys; sys.modules['torchao'] = None   # a real import failure: `import torchao` raises ImportError
from mtp_viz.app.page import layout
from mtp_viz.app.runtime import loading, service
from mtp_viz.app.runtime.pairs import PairSpec
loading.warm_up = lambda source, top=0: None
demo = layout.build_demo(loader=service.PairLoader(loading.load_and_warm), target="tiny")
h = demo.mtp_app.handlers
print(h.loader.wait(h.gate.asked("tiny", "", "", "int8", "default")).message)
print(h.loader.wait(PairSpec("tiny")).status.value)
"""


@pytest.mark.slow   # a fresh process or a wheel build: seconds; CI's slow tier runs it
def test_the_app_starts_without_torchao_and_says_what_int8_needs():
    done = subprocess.run([sys.executable, "-c", WITHOUT_TORCHAO], capture_output=True, text=True, cwd=ROOT,
                          timeout=300, env={**os.environ, "HF_HUB_OFFLINE": "1", "GRADIO_ANALYTICS_ENABLED": "False"})
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.splitlines()[-2:] == [
        "int8 needs the torchao package, which is not installed: pip install torchao (or mtp-viz[quant]).",
        "ready"]
