"""The compiled engine in the app: part of which pair is loaded (the pair cache's key,
like a precision), asked with ``#engine`` under More settings (the page's one engine
control), carried by links (``compile=1``: the alias, read once there); the
model status says what compiling took, or why it fell back; ``#compare`` names the
engine (``data-engine``) from the runs' start events, and so do traces and the exported
page. Pure views and a fake loader here; the browser test compiles the real tiny pair."""
from __future__ import annotations

import dataclasses
import html
import json
import re
import threading
from types import SimpleNamespace
from urllib.parse import parse_qsl, urlsplit

import pytest

from mtp_viz.app.handlers import form, gate, links, local
from mtp_viz.app.runtime import deploy, loading, service
from mtp_viz.app.runtime.pairs import PairSpec
from mtp_viz.engine.events import Done, Ran, Start
from mtp_viz.errors import UserError
from mtp_viz.sources import trace
from mtp_viz.sources.precision import Precision
from mtp_viz.views import export, stats
from streams import ar_run, spec_run


def _with(events, engine=None, compile_seconds=0.0, **settings):
    """A stream with its start's settings (``engine`` if given) and its done's compile seconds."""
    out = []
    for e in events:
        if isinstance(e, Start):
            extra = {**settings, **({"engine": engine} if engine else {})}
            e = dataclasses.replace(e, settings={**e.settings, **extra})
        elif isinstance(e, Done):
            e = dataclasses.replace(e, compile_seconds=compile_seconds)
        out.append(e)
    return out


def _compare(spec, ar):
    return stats.compare_html(stats.run_stats(spec), stats.run_stats(ar), greedy=True)


# ---------------------------------------------------------------- the badge (pure views)

def test_compare_carries_the_engine_of_the_start_events():
    compiled = _compare(_with(spec_run(), "compiled"), _with(ar_run(), "compiled"))
    assert 'data-engine="compiled"' in compiled and ">compiled engine<" in compiled
    assert "data-speedup=" in compiled  # the figure's hooks stay
    eager = _compare(_with(spec_run(), "eager"), _with(ar_run(), "eager"))
    assert 'data-engine="eager"' in eager and ">eager engine<" in eager and "compiled" not in eager


def test_a_run_that_does_not_say_is_eager_and_a_vllm_server_is_named():
    old = _compare(spec_run(), ar_run())  # an older trace: no settings.engine
    assert 'data-engine="eager"' in old and "eager engine" in old
    served = _compare(_with(spec_run(), backend="vllm"), _with(ar_run(), backend="vllm"))
    assert 'data-engine="vllm"' in served and "vLLM server" in served
    mixed = _compare(_with(spec_run(), "compiled"), _with(ar_run(), "eager"))
    assert 'data-engine="mixed"' in mixed
    assert "data-engine" not in stats.compare_html(stats.RunStats(), stats.RunStats(), greedy=True)  # no run yet


def test_compile_seconds_are_shown_apart_from_the_timings():
    spec, ar = _with(spec_run(), "compiled", 12.25), _with(ar_run(), "compiled", 0.05)
    shown = _compare(spec, ar)
    assert "compile 12.3 s, not in the timings" in shown
    assert stats.run_stats(spec).seconds == stats.run_stats(spec_run()).seconds  # not added to the clock
    assert "not in the timings" not in _compare(_with(spec_run(), "compiled"), _with(ar_run(), "compiled"))


def test_measure_names_the_engine_it_measured():
    from mtp_viz.measure.compare import Measurement
    m = Measurement(ratios=(1.5, 1.6, 1.7), spec_tps=30.0, ar_tps=20.0, threads=1, clock="cpu")
    compiled = Ran("compiled", "compiled engine", routing=False)
    h = stats.measurement_html(m, engine=compiled)
    assert 'data-engine="compiled"' in h and 'data-clock="cpu"' in h and "ran at <b>×1.60</b> the speed of" in h
    assert "30.0 vs 20.0 tokens/s of engine CPU time · medians of 3 repeats, alternating, 1 torch thread" in h


def test_the_exported_page_and_a_replayed_trace_say_which_engine_ran(tmp_path):
    spec, ar = _with(spec_run(), "compiled", 3.5), _with(ar_run(), "compiled")
    meta = export.page_html(spec, ar, title="t")
    assert "compiled engine · compile 3.5 s, not in the timings" in meta
    assert "eager engine" in export.page_html(spec_run(), ar_run(), title="t")
    path = trace.write(tmp_path / "t.jsonl", [*spec, *ar])
    back = trace.read(path)
    assert stats.run_stats(back).engine == "compiled"
    assert any(isinstance(e, Done) and e.compile_seconds == 3.5 for e in back)


def test_a_trace_with_an_unknown_engine_is_one_sentence(tmp_path):
    lines = trace.dumps(_with(spec_run(), "compiled")).replace('"engine": "compiled"', '"engine": "<b>x</b>"')
    path = tmp_path / "t.jsonl"
    path.write_text(lines, encoding="utf-8")
    with pytest.raises(UserError, match="settings 'engine' that is not \"compiled\" or \"eager\""):
        trace.read(path)
    assert json.loads(trace.dumps(spec_run()).splitlines()[-1]).get("compile_seconds") is None  # omitted at 0


# ---------------------------------------------------------------- which pair is loaded

def test_the_engine_is_part_of_the_pair_cache_key():
    calls = []

    def load(target, drafter, **asked):
        assert callable(asked.pop("progress", None)) == ("engine" in asked)  # a compile reports its graphs
        calls.append(asked)
        return object()
    loader = service.PairLoader(load)
    eager = loader.wait(PairSpec("tiny"), timeout=5)
    compiled = loader.wait(PairSpec("tiny", engine="compiled"), timeout=5)
    assert eager.pair is not compiled.pair
    assert loader.wait(PairSpec.of("tiny", None, engine="compiled"), timeout=5).pair is compiled.pair
    both = loader.wait(PairSpec("tiny", precision=Precision("int8"), engine="compiled"), timeout=5)
    assert calls == [{}, {"engine": "compiled"}, {"precision": Precision("int8"), "engine": "compiled"}]  # each once
    assert both.pair is not compiled.pair
    assert PairSpec.of("tiny", None, engine="compiled").key != PairSpec("tiny").key
    assert PairSpec("tiny").on("compiled") == PairSpec("tiny", engine="compiled")
    with pytest.raises(UserError, match="Unknown engine 'warp'"):
        PairSpec("tiny", engine="warp")


def test_load_and_warm_compiles_the_pages_first_run_and_warms_within_it(monkeypatch):
    """A pair asked compiled compiles the graphs of a first run as the page starts, telling
    the loader's ``progress``; the warm-up after it needs none of its own (a shorter run of
    the same settings), and the page's draft-length default is the one compiled for."""
    from mtp_viz.app.page import layout
    from mtp_viz.engine import graphs
    from mtp_viz.sources import models
    compiled = []
    monkeypatch.setattr(models, "set_threads", lambda n: None)
    monkeypatch.setattr(models, "load_pair", lambda *a, **kw: SimpleNamespace(
        use=lambda engine, **how: compiled.append((engine, how))))
    monkeypatch.setattr(loading, "warm", lambda pair: pair)
    report = print
    loading.load_and_warm("tiny", None, engine="compiled", progress=report)
    loading.load_and_warm("tiny", None)
    assert compiled == [("compiled", {"settings": [loading.FIRST_RUN], "progress": report})]   # eager: nothing
    first, warm = loading.FIRST_RUN, dataclasses.replace(loading.FIRST_RUN, max_new_tokens=8)
    for p in (3, 40):   # the warm-up's graphs are among the first run's, whatever the prompt's length
        assert graphs.speculative_graphs(p, warm.max_new_tokens, warm.draft_tokens, fixed=True) <= (
            graphs.speculative_graphs(p, first.max_new_tokens, first.draft_tokens, fixed=True))
    demo = layout.build_demo(loader=service.PairLoader(lambda *a, **kw: None), target="tiny")
    sliders = {b.elem_id: b.value for b in demo.blocks.values() if getattr(b, "elem_id", None) in
               ("draft-tokens", "max-new")}
    assert sliders == {"draft-tokens": first.draft_tokens, "max-new": first.max_new_tokens}
    mine = SimpleNamespace(name="tiny", drafter_name=None)  # a notebook's pair serves its own engine only
    monkeypatch.setattr(loading, "load_and_warm", lambda *a: ("loaded", a))
    assert loading.preloaded(mine)("tiny", None) is mine
    assert loading.preloaded(mine)("tiny", None, None, "compiled") == ("loaded", ("tiny", None, None, "compiled", None))


def _fake_pair(note=""):
    """A loaded pair as the status line reads it: on the compiled engine (a real ``Mounted`` over parts that
    say what they compiled: three target graphs and two drafter steps), or fallen back (``note``)."""
    from mtp_viz.engine.decoder import Mounted
    from mtp_viz.engine.graphs import Graph
    part = lambda *graphs: SimpleNamespace(graphs=lambda: dict.fromkeys(graphs, 0.5))  # noqa: E731
    target, step = part(*(Graph("verify", 256, w) for w in (1, 2, 3))), part(Graph("draft", 256), Graph("draft", 512))
    mounted = None if note else Mounted(target, step, seconds=74.24)
    return SimpleNamespace(precision={"target": "float32", "drafter": None}, compile_note=note,
                           compile_seconds=mounted.seconds if mounted else 0.0, chat_template=None, mounted=mounted)


@pytest.fixture
def handlers():
    go = threading.Event()

    def load(target, drafter, **asked):
        go.wait(5)
        return _fake_pair()
    loader = service.PairLoader(load)
    h = local.Handlers(loader, deploy.presets(loader.allow), ("tiny", None), cap=16, prompt_cap=256)
    h.go = go
    return h


def test_the_status_says_what_compiling_took(handlers):
    line, *_ = handlers.gate.load("tiny", "", "", "default", "default", "compiled")
    assert ", compiled (then compiling its graphs once, before its first run: a minute or more)" in line
    assert "Loading" in line
    handlers.go.set()
    handlers.loader.wait(PairSpec("tiny", engine="compiled"), timeout=5)
    ready = handlers.gate.status_line("tiny", "", "", "default", "default", "compiled")
    assert "Compiled in 74.2 s (5 graphs), kept out of every run&#x27;s timing." in ready
    assert "mv-msg-info" in ready
    assert "Compiled in" not in handlers.gate.model_line(PairSpec("tiny"))  # the eager pair: another, not loaded
    with pytest.raises(UserError, match="Unknown engine 'yes'; choose one of: eager, compiled"):
        form.engine_of("yes")
    assert form.engine_of("compiled") == "compiled" and form.engine_of(None) == "eager"
    with pytest.raises(UserError, match="^The engine must be a text, not True.$"):   # the switch it replaced: gone
        form.engine_of(True)


def test_the_status_says_which_graph_compiles_and_how_long_is_left():
    """While a pair compiles (the loader's ``progress``), ``#model-status`` names the graph,
    k of n, and the time left the loader's work estimated."""
    from mtp_viz.engine.graphs import Graph, Progress
    go = threading.Event()

    def load(target, drafter, progress=None, **asked):
        progress(Progress(2, 5, Graph("verify", 256, 3), 30.0, 61.0))
        go.wait(5)
        return _fake_pair()
    loader = service.PairLoader(load)
    h = local.Handlers(loader, deploy.presets(loader.allow), ("tiny", None), cap=16, prompt_cap=256)
    spec = PairSpec("tiny", engine="compiled")
    loader.start(spec)
    for _ in range(100):
        line = html.unescape(h.gate.model_line(spec))
        if "graph 2 of 5" in line:
            break
        threading.Event().wait(0.05)
    assert ("Compiling the bundled tiny pair, compiled before its first run, graph 2 of 5: the target over 3 "
            "tokens, with the drafter's state (256-position cache); about 61 s left…") in line
    go.set()
    assert loader.wait(spec, timeout=5).progress is None   # a ready pair: its summary


def test_a_compile_that_fell_back_is_a_visible_warning():
    note = "The compiled engine needs a Gemma 4 target; decoding stays eager."
    line, level = gate.compiled_line(_fake_pair(note=note))
    assert note in line and level == "warn" and "/" not in line.replace("s/", "")
    assert gate.compiled_line(SimpleNamespace(mounted=None, compile_note="")) == ("", "info")


def test_a_link_carries_the_compiled_engine():
    limits = links.Limits(models=("tiny",), max_new_tokens=64, prompt_chars=100)
    assert links.parse({"engine": "compiled"}, limits).values == {"engine": "compiled"}
    assert links.parse({"compile": "1"}, limits).values == {"engine": "compiled"}   # the alias it replaced
    assert links.parse({"compile": "0"}, limits).values == {"engine": "eager"}
    assert "compile (must be 1 or 0)" in links.parse({"compile": "yes"}, limits).sentence()
    assert "engine (must be one of eager, compiled" in links.parse({"engine": "warp"}, limits).sentence()
    q = links.query({"model": "tiny", "engine": "compiled"}, limits)
    assert dict(parse_qsl(urlsplit(q).query)) == {"model": "tiny", "engine": "compiled"}
    assert "engine" not in links.query({"model": "tiny", "engine": "eager"}, limits)  # the default


def test_the_page_has_the_engine_control_in_the_pair():
    from mtp_viz.app.page import layout
    demo = layout.build_demo(loader=service.PairLoader(lambda *a, **kw: None), target="tiny")
    radio = next(b for b in demo.blocks.values() if getattr(b, "elem_id", None) == "engine")
    assert radio.value == "eager" and radio.label == "Engine"
    assert radio.choices[:2] == [("eager engine", "eager"), ("compiled engine", "compiled")]   # the table's
    assert "its time reported apart" in html.unescape(radio.info)


# ---------------------------------------------------------------- a run that needs new graphs (compiles)

def _slot(frames, name):
    i = local.OUTPUTS.index(name)
    return [f[i] for f in frames if isinstance(f[i], str)]


@pytest.mark.slow
def test_a_run_that_needs_new_graphs_compiles_them_first_with_progress_in_both_status_lines():
    """A compiled pair asked for more drafts than it compiled for: Run compiles the missing
    graphs before the first token, saying "graph k of n" in ``#status`` and
    ``#model-status``; the runs then compile nothing (no "compile … s, not in the timings"
    under the badge) and the badge has its speedup."""
    from factories import gemma_assistant, gemma_target, word_tokenizer
    from mtp_viz.sources import compiling
    from mtp_viz.sources.models import from_models
    from mtp_viz.sources.settings import RunSettings
    pair = from_models(gemma_target(layers=2), gemma_assistant(k=2), word_tokenizer())
    pair.use("compiled", settings=[RunSettings("w10 w11 w12", max_new_tokens=8, draft_tokens=2, chat=False)])
    loader = service.PairLoader(lambda target, drafter, **asked: pair)
    h = local.Handlers(loader, deploy.presets(loader.allow), ("tiny", None), cap=16, prompt_cap=64)
    asked = RunSettings("w10 w11 w12", max_new_tokens=16, draft_tokens=8, chat=False, schedule="confidence")
    missing = compiling.needed(pair, asked)
    assert [g.width for g in missing] == [1, 2, 5, 9]   # drafts of any length up to 8; 3 compiled above
    values = dict(prompt="w10 w11 w12", model="tiny", custom_target="", custom_drafter="", max_new_tokens=16,
                  draft_tokens=8, schedule="confidence", drafter_kind="mtp", decoding="greedy", temperature=0.8,
                  top_p=0.95, top_k=0, seed=0, chat=False, baseline=True, engine="compiled")
    frames = list(h.run(values, None))
    status, model = _slot(frames, "status"), _slot(frames, "model_status")
    for lines in (status, model):
        assert any("Compiling this run&#x27;s graphs before its first token, graph 1 of 4: the target over 1 token"
                   in line for line in lines), lines
    assert "Done." in status[-1] and "Compiled in" in model[-1]
    compare = _slot(frames, "compare")[-1]
    assert "data-speedup=" in compare and "not in the timings" not in compare
    assert compiling.needed(pair, asked) == []


def test_an_engine_registered_at_run_time_is_offered_everywhere_with_no_other_edit(monkeypatch):
    """Adding an engine is one line of the table: a stub third engine (the eager engine's ``mount`` under
    another name) is a choice of the page's ``#engine``, of links (``engine=``), of the CLI's ``--engine``
    and of Measure's ``#measure-beside``, and the loader loads it and Measure times it beside the pair, with
    no other edit (its CLI runs and bench: tests/engine/test_engines.py)."""
    from mtp_viz.app.page import layout, wiring
    from mtp_viz.cli.main import build_parser
    from mtp_viz.engine.engines import ENGINES, Engine
    from mtp_viz.sources.models import load_pair
    monkeypatch.setitem(ENGINES, "spare", Engine("spare engine", "mtp_viz.engine.decoder:mount", False,
                                                 "eager decoding under another name"))
    limits = links.Limits(models=("tiny",), max_new_tokens=64, prompt_chars=100)
    assert links.parse({"engine": "spare"}, limits).values == {"engine": "spare"}
    for command in ("generate", "bench", "profile"):
        sub = next(a for a in build_parser(command)._actions if a.dest == "command").choices[command]
        assert "spare" in next(a for a in sub._actions if a.option_strings == ["--engine"]).choices
    demo = layout.build_demo(loader=service.PairLoader(lambda *a, **kw: None), target="tiny")
    by_id = {getattr(b, "elem_id", None): b for b in demo.blocks.values()}
    assert ("spare engine", "spare") in by_id["engine"].choices and "compile" not in by_id   # one engine control
    assert by_id["measure-beside"].choices == [("none", "none"), ("compiled engine", "compiled"),
                                               ("spare engine", "spare")]   # all but the run's own (eager)
    assert by_id["measure-beside"].value == "none"
    on_spare = wiring.beside_follows(deploy.AllowList().engines, "spare", "spare")   # the run's engine now: none
    assert on_spare["choices"] == [("none", "none"), ("eager engine", "eager"), ("compiled engine", "compiled")]
    assert on_spare["value"] == "none"
    assert wiring.beside_follows(deploy.AllowList().engines, "compiled", "spare")["value"] == "spare"   # kept
    calls = []
    loader = service.PairLoader(lambda target, drafter, **asked: calls.append(asked) or object())
    assert loader.wait(PairSpec("tiny", engine="spare"), timeout=5).status == "ready"
    assert calls == [{"engine": "spare"}]   # no compile: no progress, no place in the compiler's line
    assert trace.loads(trace.dumps(_with(spec_run(), "spare")))[0].settings["engine"] == "spare"  # its traces read
    loader = service.PairLoader(lambda target, drafter, engine=None, **kw: load_pair(target, drafter, engine=engine))
    h = local.Handlers(loader, deploy.presets(loader.allow), ("tiny", None), cap=16, prompt_cap=64)
    values = dict(prompt="def f():", model="tiny", custom_target="", custom_drafter="", max_new_tokens=8,
                  draft_tokens=3, schedule="constant", drafter_kind="mtp", decoding="greedy", temperature=0.8,
                  top_p=0.95, top_k=0, seed=0, chat=False, baseline=True)
    frames = list(h.measuring.measure(values, 2, None, "spare", ""))
    page = _slot(frames, "compare")[-1]
    assert "Measured 2 repeats of each mode" in html.unescape(_slot(frames, "status")[-1])
    assert re.findall(r'<tr data-decoder="([^"]*)" data-engine="[^"]*" data-setting="([^"]*)"', page)[2:] == [
        ("the eager engine", "plain")]   # the spare engine's plain decoding beside the pair (its decoder: eager's)
    assert loader.state(PairSpec("tiny", engine="spare")).status == "ready"   # loaded beside, a pair of its own


def test_a_deployment_without_compiles_lists_the_compiled_engine_as_not_offered(monkeypatch, handlers):
    from mtp_viz.app.page import layout
    monkeypatch.setenv("MTP_VIZ_COMPILE", "0")
    demo = layout.build_demo(loader=service.PairLoader(lambda *a, **kw: None), target="tiny")
    radio = next(b for b in demo.blocks.values() if getattr(b, "elem_id", None) == "engine")
    assert "not offered on this deployment: compiled engine" in html.unescape(radio.info)
    assert radio.interactive == (len(deploy.AllowList().engines) > 1)   # eager alone: nothing to choose
    with pytest.raises(UserError, match="^This deployment does not offer the compiled engine.$"):
        handlers.gate.asked("tiny", "", "", "default", "default", "compiled")
    beside = next(b for b in demo.blocks.values() if getattr(b, "elem_id", None) == "measure-beside")
    assert beside.choices == [("none", "none")] and not beside.interactive   # no other engine to measure
    assert "not offered on this deployment" in beside.info
