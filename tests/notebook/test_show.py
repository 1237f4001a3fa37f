"""The notebook front end for real: ``mtp_viz.show(pair, prompt)`` in a Jupyter kernel
draws the app's token spans while the run streams, then its charts; outside a notebook
it prints the terminal view, for a pair's run, a recording or events alike;
``mtp_viz.launch(pair)`` serves the app on a pair already in memory."""
from __future__ import annotations

import json
import re

import pytest

from locations import ROOT
from mtp_viz.errors import UserError
from notebook_kernel import TINY_PAIR as LOAD, code_cell, execute, outputs

pytestmark = pytest.mark.slow  # real models, kernels and a served app: a minute or more

PROMPT = "def parse(line):\n"



@pytest.fixture(scope="module")
def tiny_in_memory():
    from transformers import AutoModelForCausalLM, AutoTokenizer

    import mtp_viz
    from mtp_viz.sources.presets import resolve
    target, assistant = resolve("tiny")
    return mtp_viz.from_models(AutoModelForCausalLM.from_pretrained(target),
                               AutoModelForCausalLM.from_pretrained(assistant), AutoTokenizer.from_pretrained(target))


def ids(events) -> list[int]:
    return [e.token_id for e in events if e.type in ("accepted", "bonus", "token")]


def test_show_in_a_real_kernel_draws_the_app_token_spans_then_the_charts(tmp_path):
    import nbformat
    nb = nbformat.v4.new_notebook(cells=[
        code_cell(LOAD),
        code_cell(f"events = mtp_viz.show(pair, {PROMPT!r}, max_new_tokens=24, chat=False)"),
        code_cell("print(json.dumps([e.token_id for e in events if e.type in ('accepted', 'bonus')]))"),
        code_cell("chat = mtp_viz.show(pair, [{'role': 'user', 'content': 'import os'}], mode='autoregressive', "
                  "max_new_tokens=8)\nprint(len([e for e in chat if e.type == 'token']))"),
        code_cell("print(mtp_viz.__file__)"),
    ])
    done = execute(nb, tmp_path)
    assert outputs(done, "error") == []
    streams = [o.text for o in outputs(done, "stream") if o.name == "stdout"]
    assert streams[-1].strip() == str(ROOT / "mtp_viz" / "__init__.py")  # the kernel ran this checkout's mtp_viz
    spec_ids = json.loads(streams[0])
    html = outputs(done, "text/html")
    spec_cell = next(h for h in html if 'data-kind="accepted"' in h or 'data-kind="bonus"' in h)
    # the live output was redrawn to the whole run: one span per kept token, the stats line
    kept = re.findall(r'<span class="tok[^"]*" data-kind="(?:accepted|bonus)"[^>]* data-step=', spec_cell)
    assert len(kept) == len(spec_ids) == 24
    assert "tokens/s" in spec_cell and "speculative" in spec_cell and "mv-legend" in spec_cell
    assert ".tok[data-kind=\"accepted\"]" in spec_cell  # the app's own stylesheet came along
    # the plain baseline took turns with it: the app's speedup badge, worded as the app's
    assert 'id="compare"' in spec_cell and "data-speedup=" in spec_cell and "one run each, in turns" in spec_cell
    figures = outputs(done, "application/vnd.plotly.v1+json")
    assert len(figures) >= 2 * 5  # every chart of CHARTS, after each run
    titles = [f["layout"]["title"]["text"] for f in figures[:5]]
    assert "Acceptance rate per step" in titles[0]
    # a message list is a prompt too, and an autoregressive run has its own spans
    assert int(streams[1]) == 8
    assert any(len(re.findall(r'data-kind="token"[^>]* data-step=', h)) == 8 for h in html)


def test_the_inline_view_is_the_same_run_as_generate(tiny_in_memory):
    """What show returns is the run generate gives (greedy: the same tokens)."""
    import io

    from mtp_viz.notebook import show_events
    out = io.StringIO()
    shown = show_events(tiny_in_memory.generate(PROMPT, max_new_tokens=24, chat=False), out=out)
    again = list(tiny_in_memory.generate(PROMPT, max_new_tokens=24, chat=False))
    assert ids(shown) == ids(again) and len(ids(shown)) == 24
    text = "".join(e.text for e in shown if e.type in ("accepted", "bonus"))
    printed = out.getvalue()
    assert printed.startswith(text) and "24 new tokens" in printed and "\x1b[" not in printed  # no tty: no colour


def test_show_outside_a_notebook_prints_the_terminal_view(tiny_in_memory, capsys):
    import mtp_viz
    events = mtp_viz.show(tiny_in_memory, PROMPT, max_new_tokens=12, chat=False)
    printed = capsys.readouterr().out
    assert len(ids(events)) == 12 and "12 new tokens" in printed and "(tokens / verify)" in printed
    assert {e.mode for e in events if e.type == "start"} == {"speculative"}  # the drawn run, as before
    # and the speedup over its plain baseline, worded as the app's Run words it
    line = printed.strip().splitlines()[-1]
    assert re.fullmatch(r"speculative ran at ×\d+\.\d\d the speed of the eager engine's own plain decoding "
                        r"\(\d+\.\d vs \d+\.\d tokens/s of engine CPU time · one run each, in turns, "
                        r"1 torch thread\)", line), line
    mtp_viz.show(tiny_in_memory, PROMPT, max_new_tokens=4, chat=False, baseline=False)
    assert "speculative ran at" not in capsys.readouterr().out


def test_show_times_with_the_apps_threads_and_gives_the_notebooks_back(tiny_in_memory, capsys, monkeypatch):
    """A notebook's torch may have every core; show() runs with the app's threads
    (MTP_VIZ_THREADS here) and puts the notebook's back after."""
    import torch

    import mtp_viz
    monkeypatch.setenv("MTP_VIZ_THREADS", "1")
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        events = mtp_viz.show(tiny_in_memory, PROMPT, max_new_tokens=4, chat=False)
        assert events[0].settings["threads"] == 1 and events[0].settings["clock"] == "cpu"
        assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(before)


def test_show_draws_events_a_list_or_a_stream_as_it_draws_the_pair_run(tiny_in_memory, capsys):
    """Events given as a list, or as a run still streaming (a generator), print the same
    terminal view as the pair's run itself, and come back whole."""
    import mtp_viz
    ran = mtp_viz.show(tiny_in_memory, PROMPT, max_new_tokens=12, chat=False, baseline=False)
    by_pair = capsys.readouterr().out
    from_list = mtp_viz.show(ran)
    assert capsys.readouterr().out == by_pair and from_list == ran
    streamed = mtp_viz.show(tiny_in_memory.generate(PROMPT, max_new_tokens=12, chat=False))
    text = by_pair.rsplit("\n", 2)[0]  # the tokens, before the summary line (its tokens/s differ)
    assert ids(streamed) == ids(ran) and capsys.readouterr().out.rsplit("\n", 2)[0] == text
    from mtp_viz.notebook import show
    assert mtp_viz.show is show and "show" in mtp_viz.__all__
    assert not hasattr(tiny_in_memory, "show")  # the pair does not draw itself: the notebook draws it


def test_show_refuses_what_it_cannot_draw_in_one_sentence(tiny_in_memory, capsys):
    import mtp_viz
    events = list(tiny_in_memory.generate(PROMPT, max_new_tokens=2, chat=False))
    for call, says in [(lambda: mtp_viz.show(tiny_in_memory), "give it one"),
                       (lambda: mtp_viz.show(events, PROMPT), r"\(given: prompt\)"),
                       (lambda: mtp_viz.show(events, max_new_tokens=4), r"\(given: max_new_tokens\)"),
                       (lambda: mtp_viz.show(PROMPT), "not str"),
                       (lambda: mtp_viz.show(3), "not int")]:
        with pytest.raises(UserError, match=says) as err:
            call()
        assert str(err.value).count(". ") == 0 and str(err.value).endswith(".")
    assert capsys.readouterr().out == ""  # nothing was drawn


def test_launch_serves_the_app_on_the_pair_in_memory(tiny_in_memory):
    """No second load: the app's loader hands out the very pair it was given, and its
    /generate gives that pair's tokens."""
    import socket

    from gradio_client import Client

    import mtp_viz
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    demo = mtp_viz.launch(tiny_in_memory, port=port)
    try:
        events = Client(f"http://127.0.0.1:{port}/", verbose=False).predict(
            prompt=PROMPT, max_new_tokens=16, chat=False, api_name="/generate")
        assert [e["token_id"] for e in events if e["type"] in ("accepted", "bonus")] == \
            ids(tiny_in_memory.generate(PROMPT, max_new_tokens=16, chat=False))
        from mtp_viz.app.runtime.pairs import PairSpec
        state = demo.mtp_app.loader.state(PairSpec(tiny_in_memory.name, tiny_in_memory.drafter_name))
        assert state.pair is tiny_in_memory
    finally:
        demo.close()


def test_the_bench_runner_measures_a_pair_in_memory(tiny_in_memory):
    """The measurement layer's Runner on from_models' pair: its speculative run,
    transformers' reference and plain decoding agree (greedy), with the records the
    report reads."""
    from mtp_viz.measure.records import Setting
    from mtp_viz.measure.runner import Runner
    from mtp_viz.sources.settings import RunSettings
    pair = tiny_in_memory
    runner = Runner(pair, RunSettings("", drafter="mtp", max_new_tokens=24, chat=False))
    try:
        ours, _ = runner.run("speculative", PROMPT, Setting("constant", 4))
        reference, _ = runner.run("reference", PROMPT, Setting("constant", 4))
        plain, _ = runner.run("autoregressive", PROMPT)
    finally:
        runner.close()
    assert ours.ids == reference.ids == plain.ids and len(ours.ids) == 24
    assert ours.target_forwards < plain.target_forwards


def test_show_measurement_is_the_apps_measure_on_a_pair_in_memory(tiny_in_memory, capsys):
    """The notebook measures through the measurement layer, as the app's Measure does: both
    modes, N repeats, a verdict; outside a notebook, one line. Bad settings are one sentence."""
    from mtp_viz.notebook import show_measurement
    m = show_measurement(tiny_in_memory, PROMPT, repeats=2, max_new_tokens=12, chat=False)
    assert m.repeats == 2 and all(r > 0 for r in m.ratios)
    line = capsys.readouterr().out.strip()
    assert line.startswith("speculative ran at ×") and m.verdict in line and len(line.splitlines()) == 1
    with pytest.raises(UserError, match="between 2 and 100 repeats"):
        show_measurement(tiny_in_memory, PROMPT, repeats=1)
    with pytest.raises(UserError, match="Unknown schedule"):
        show_measurement(tiny_in_memory, PROMPT, schedule="magic")
