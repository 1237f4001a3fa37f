"""The app's run layer without a browser: the worker thread, frames, handlers, the
pair cache and the allow-list. Fake pairs replay hand-built streams; the timing tests
run the real engine on a small random Gemma 4 pair."""
from __future__ import annotations

import re
import threading
import time

import pytest
import torch

from factories import gemma_assistant, gemma_target
from mtp_viz.analysis import stream
from mtp_viz.app.handlers import local, recorded
from mtp_viz.app.runtime import deploy, loading, pairs, runs, service
from mtp_viz.app.runtime.pairs import PairSpec
from mtp_viz.engine.events import Done, Error
from mtp_viz.errors import UserError
from mtp_viz.measure import compare as measure
from mtp_viz.sources.base import Source
from mtp_viz.sources.local import LocalSource
from mtp_viz.sources.settings import RunSettings
from mtp_viz.views import tokens as view
from mtp_viz.views.frame import PLOTS
from streams import ar_run, spec_run


class FakePair(Source):
    """Replays hand-built streams; records the settings it was asked for. It is a
    source of its own, and what the handlers load (they reach it through fake_call)."""
    pausable = True

    def __init__(self, fail=None, chat_template=None):
        self.calls, self.fail, self.chat_template = [], fail, chat_template

    def runs(self, s, stop=None, pause=None):
        for mode in s.modes:
            self.calls.append((mode, s))
            if self.fail:
                raise self.fail
            yield from ((mode, e) for e in (spec_run() if mode == "speculative" else ar_run()))


def fake_call(pair, s, stop=None, pause=None, schedules=None):
    """The handlers' model work (local.runs on a real pair) on a FakePair."""
    return pair.runs(s, stop, pause)


def settings(**kw):
    return RunSettings(**{"prompt": "hi", "draft_tokens": 3, **kw})


def test_compare_frames_runs_both_modes_in_turns():
    pair, sess = FakePair(), runs.Session()
    frames = list(runs.compare_frames(pair, settings(), sess, frame_interval=0))
    assert [m for m, _ in pair.calls] == ["speculative", "autoregressive"]
    assert sess.spec == spec_run() and sess.ar == ar_run()
    # both panes and their stats are drawn (the order of turns: sources/test_interleave.py)
    assert {"spec", "ar", "spec_stats", "ar_stats"} <= {k for f in frames for k in f.shown()}
    final = frames[-1]
    assert final.last and set(final.figures) >= {"acceptance-plot", "draft-length-plot"}
    assert "token-identical" in final.compare and 'data-basis="single run"' in final.compare
    assert "mtp-theory" in final.theory and not any(f.last for f in frames[:-1])


def test_compare_frames_turn_failures_into_one_sentence():
    sess = runs.Session()
    frames = list(runs.compare_frames(FakePair(UserError("Unknown model id x.")), settings(), sess))
    errors = [f.status for f in frames if "mv-msg-error" in (f.status or "")]
    assert errors == [view.message_html("Unknown model id x.", level="error")]
    assert isinstance(sess.spec[-1], Error) and not sess.ar
    # anything else is one generic sentence that echoes no text of the exception
    frames = list(runs.compare_frames(FakePair(KeyError("/secret/path")), settings(), runs.Session()))
    msg = [f.status for f in frames if "mv-msg-error" in (f.status or "")][0]
    assert "KeyError" in msg and "/secret" not in msg


@pytest.mark.slow
def test_fast_steps_share_frames_but_the_last_frame_is_complete():
    sess = runs.Session()
    frames = list(runs.compare_frames(FakePair(), settings(), sess, frame_interval=60))
    spec = [f.spec for f in frames if f.spec is not None]
    assert spec[-1] == view.tokens_html(sess.spec)


def test_live_charts_only_with_speculative_news():
    """The live charts plot only the speculative run: once it is done they are not
    redrawn (on the machine the baseline is still timed on)."""
    class Source(FakePair):
        def runs(self, s, stop=None, pause=None):
            yield from (("speculative", e) for e in spec_run())
            for e in ar_run():
                time.sleep(0.01)  # the consumer catches up: the baseline's events come alone
                yield "autoregressive", e
    sess = runs.Session()
    frames = list(runs.compare_frames(Source(), settings(), sess, frame_interval=0, chart_interval=0))
    *live, last, final = [f for f in frames if {"spec", "ar", "compare"} & f.shown()]
    assert any(f.spec is not None for f in live) and any(f.spec is None for f in live)
    assert all(bool(f.figures) == (f.spec is not None) for f in live)
    assert last.figures and final.figures  # the run's last frame, then the summary


# What a new chart takes: its entry in charts.CHARTS, patched in before anything else
# reads the registry, as an edit of charts.py would be (a subprocess, so this one's
# modules keep the real registry).
EXTRA_CHART = """
import json, sys
from mtp_viz.views import charts
charts.CHARTS += (charts.Chart("extra-plot", "An extra chart", "It counts the steps. It is a test.",
                               lambda spec, ar: charts.tau_figure(spec), live=True, row=2),)
from mtp_viz.views import explain
from mtp_viz.app.handlers import local
from mtp_viz.app.page import layout
from mtp_viz.app.runtime import runs
from mtp_viz.views.frame import Frame
from streams import ar_run, spec_run

cfg = layout.build_demo(target="tiny").get_config_file()
ids = {c["id"]: c["props"].get("elem_id") for c in cfg["components"]}
def rows(node):
    kids = [ids.get(k["id"]) for k in node.get("children", [])]
    here = [kids] if kids and all(k and k.endswith("-plot") for k in kids) else []
    return here + [r for k in node.get("children", []) for r in rows(k)]
route = next(d for d in cfg["dependencies"] if [ids.get(t[0]) for t in d["targets"]] == ["run"] and d["outputs"])
run = next(d for d in cfg["dependencies"] if [t[0] for t in d["targets"]] == route["outputs"][:1])  # a local run
sess = runs.Session()
sess.spec, sess.ar = spec_run(), ar_run()
json.dump({"figures": sorted(charts.all_figures(spec_run(), ar_run())), "live": sorted(charts.live_figures(spec_run())),
           "explain": explain.EXPLAIN["extra-plot"], "final": sorted(runs.final_frame(sess).figures),
           "slots": local.OUTPUTS[-2:], "rows": rows(cfg["layout"]), "run": [ids[o] for o in run["outputs"]],
           "frame": len(local.outputs(Frame())),
           "about": any('data-explain="extra-plot"' in str(c["props"].get("value")) for c in cfg["components"])},
          sys.stdout)
"""


def test_a_chart_is_one_entry_in_the_registry():
    import json
    import os
    import subprocess
    import sys

    from locations import ROOT, TESTS
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(TESTS)])}
    proc = subprocess.run([sys.executable, "-c", EXTRA_CHART], capture_output=True, text=True, timeout=300,
                          env=env)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert "extra-plot" in out["figures"] and "extra-plot" in out["final"] and len(out["figures"]) == 7
    assert out["live"] == ["acceptance-plot", "draft-length-plot", "extra-plot"]  # drawn while a run streams
    assert out["explain"] == ["An extra chart", "It counts the steps. It is a test."] and out["about"]
    assert out["slots"] == ["experts-plot", "extra-plot"]
    assert out["rows"][:3] == [["acceptance-plot", "draft-length-plot"],  # then the dashboard's row
                               ["tokens-per-forward-plot", "position-plot", "timing-plot"],
                               ["experts-plot", "extra-plot"]]
    assert "extra-plot" in out["run"] and out["frame"] == len(out["run"])  # a run's frames fill it


@pytest.fixture(scope="module")
def real_pair():
    """A random Gemma 4 pair behind the ModelPair interface (no tokenizer needed)."""
    from factories import word_tokenizer
    from mtp_viz.sources.pair import ModelPair
    return ModelPair(gemma_target(layers=4), gemma_assistant(), word_tokenizer(), "random", "random", "cpu")


def _engine_seconds(events):
    return next(e.seconds for e in events if isinstance(e, Done))


@pytest.mark.slow
def test_engine_time_does_not_include_a_slow_consumer(real_pair):
    """The engine's clock runs on its worker: a consumer that sleeps after every event
    must not show up in the engine's seconds. A negative control consumes the same
    generator directly and sees the sleeps."""
    prompt = " ".join(f"w{i}" for i in range(10, 30))
    kw = dict(mode="speculative", max_new_tokens=48, draft_tokens=4, chat=False)
    delay = 0.04

    def slow(events):
        out = []
        for e in events:
            out.append(e)
            time.sleep(delay)
        return out

    unhindered = min(_engine_seconds(list(real_pair.generate(prompt, **kw))) for _ in range(3))
    direct = slow(real_pair.generate(prompt, **kw))
    charged = delay * len(direct)
    assert _engine_seconds(direct) >= charged  # negative control: inline, the sleeps count

    stop, got = threading.Event(), []
    worker = runs.Worker(lambda: real_pair.generate(prompt, stop=stop, **kw), stop)
    for batch in worker.batches(0.05):
        got.extend(slow(batch))
    worker.close()
    assert [e.to_dict() for e in got if not isinstance(e, Done)] and isinstance(got[-1], Done)
    # a property, not a benchmark: the worker's engine time stays far below what the
    # consumer's sleeps would have added (charged is many times the unhindered time);
    # against the direct run too, which ran under the same load as the worker's
    assert charged > 4 * unhindered
    assert _engine_seconds(got) < max(unhindered + charged / 2, _engine_seconds(direct) - charged / 2)


def test_closing_the_frames_stops_the_worker(real_pair):
    """A closed tab ends the handler's generator: the worker must stop within a step."""
    produced = []

    class Recording(LocalSource):  # the real pair; every event the engine makes is recorded
        def runs(self, s, stop=None, pause=None):
            for mode, e in super().runs(s, stop, pause):
                produced.append(e)
                yield mode, e

    sess = runs.Session()
    s = RunSettings(prompt=" ".join(f"w{i}" for i in range(10, 30)), max_new_tokens=400, chat=False,
                    modes=("speculative",))
    frames = runs.compare_frames(Recording(real_pair), s, sess, frame_interval=0)
    next(frames), next(frames)  # the status line, then the first frame of tokens
    frames.close()
    assert sess.stop.is_set()
    assert not [t for t in threading.enumerate() if t.name == "mtp-viz-run" and t.is_alive()]
    done = [e for e in produced if isinstance(e, Done)]
    assert done and done[0].stop_reason == "stopped" and done[0].new_tokens < 400


def test_measure_reports_bench_ratios(real_pair):
    s = RunSettings(prompt=" ".join(f"w{i}" for i in range(10, 30)), max_new_tokens=16, chat=False,
                    drafter="mtp")
    m = measure.measure(real_pair, s, 3, threading.Event())
    assert m.repeats == 3 and all(r > 0 for r in m.ratios) and m.threads == 1 and m.clock == "cpu"
    assert min(m.ratios) <= m.median <= max(m.ratios)


def _values(**kw):
    v = dict(prompt="hi", model="tiny", custom_target="", custom_drafter="", max_new_tokens=8,
             draft_tokens=3, schedule="constant", drafter_kind="mtp", decoding="greedy",
             temperature=0.8, top_p=0.95, top_k=0, seed=0, chat=True, baseline=True)
    return {**v, **kw}


def _handlers(load, allow=""):
    loader = service.PairLoader(load, allow=deploy.AllowList(allow))
    h = local.Handlers(loader, deploy.presets(loader.allow), ("tiny", None), cap=16, prompt_cap=64)
    h.runs = fake_call
    return h


def _status(frames):
    i = local.OUTPUTS.index("status")
    return [f[i] for f in frames if isinstance(f[i], str)]


@pytest.mark.parametrize("values, sentence", [
    (dict(prompt="  "), "Type a prompt first"),
    (dict(model=local.CUSTOM), "custom target"),
    (dict(max_new_tokens=32), "between 1 and 16"),
    (dict(max_new_tokens=float("nan")), "Max new tokens must be a whole number"),
    (dict(decoding="sampling", temperature=float("inf")), "Temperature must be a finite number"),
    (dict(decoding="sampling", seed=1e30), "seed must be a whole number from 0"),
    (dict(prompt="x" * 5000), "too long"),
])
def test_handlers_turn_bad_input_into_one_sentence(values, sentence):
    pair = FakePair()
    h = _handlers(lambda t, d: pair)
    msgs = _status(list(h.run(_values(**values), None)))
    assert sentence in msgs[-1] and "mv-msg-error" in msgs[-1]
    ok = _status(list(h.run(_values(), None)))  # and the next run works
    assert "Done." in ok[-1]


def test_a_failed_load_puts_the_picker_back_on_the_loaded_pair():
    """Load E2B where the Hub cannot be reached: one sentence at once, and the picker goes back
    to the pair that is loaded, so the next Run runs it rather than trying E2B again."""
    from mtp_viz.sources.models import load_pair
    h = _handlers(lambda t, d: load_pair(t, d))
    assert h.loader.wait(PairSpec("tiny"), timeout=120).status == service.Load.READY
    h.gate.load("e2b", "", "")
    st = h.loader.wait(PairSpec(*h.gate.pick("e2b")), timeout=30)
    assert st.status == service.Load.ERROR
    line, timer, chat, picker = h.gate.tick("e2b", "", "")
    assert picker["value"] == "tiny" and "cannot be reached" in line and "back on Bundled tiny pair" in line
    assert "mv-msg-error" in line
    # nothing loaded but the failed pair: the picker stays where it is
    lone = _handlers(lambda t, d: load_pair(t, d))
    lone.gate.load("e2b", "", "")
    lone.loader.wait(PairSpec(*lone.gate.pick("e2b")), timeout=30)
    assert "value" not in lone.gate.tick("e2b", "", "")[3]


def test_handlers_run_streams_both_panes_and_keeps_the_session():
    pair = FakePair()
    h = _handlers(lambda t, d: pair)
    frames = list(h.run(_values(max_new_tokens=8), None))
    assert pair.calls[0][1].max_new_tokens == 8
    sess = frames[0][len(local.OUTPUTS)]
    assert isinstance(sess, runs.Session) and sess.spec and sess.ar
    spec_i, ar_i = local.OUTPUTS.index("spec"), local.OUTPUTS.index("ar")
    assert 'data-kind="accepted"' in [f[spec_i] for f in frames if isinstance(f[spec_i], str)][-1]
    assert 'data-kind="token"' in [f[ar_i] for f in frames if isinstance(f[ar_i], str)][-1]
    assert "Replay done" in _status(list(recorded.Traces.replay(sess, 100.0)))[-1]


def test_a_run_downloads_as_a_trace_that_replays_without_a_model(tmp_path):
    pair = FakePair()
    h = _handlers(lambda t, d: pair)
    sess = list(h.run(_values(), None))[0][len(local.OUTPUTS)]
    path = h.traces.download_files(sess)[0]["value"]
    from mtp_viz.sources import trace
    assert trace.read(path) == spec_run() + ar_run()
    h2 = _handlers(lambda t, d: pytest.fail("a trace replay must not load a model"))
    frames = list(h2.traces.replay_trace(path, None, 100.0))
    sess2 = frames[0][len(local.OUTPUTS)]
    assert sess2.spec == spec_run() and sess2.ar == ar_run()
    assert "Replay done" in _status(frames)[-1]
    spec_i = local.OUTPUTS.index("spec")
    assert [f[spec_i] for f in frames if isinstance(f[spec_i], str)][-1] == view.tokens_html(spec_run())
    assert all(not isinstance(frames[-1][local.OUTPUTS.index(k)], dict) for k in PLOTS)  # charts
    bad = tmp_path / "bad.jsonl"
    bad.write_text("<script>/etc/secret</script>")
    msgs = _status(list(h2.traces.replay_trace(str(bad), None, 100.0)))
    assert msgs == [view.message_html("Line 1 of the trace is not JSON.", level="error")]
    assert all(u["interactive"] is False for u in h2.traces.download_files(None))


def test_example_traces_are_offered_by_name_and_replay():
    h = _handlers(lambda t, d: pytest.fail("no model"))
    choices = h.traces.example_traces()
    assert choices and all("/" not in stem for _, stem in choices)
    frames = list(h.traces.replay_example(choices[0][1], None, 100.0))
    assert "Replay done" in _status(frames)[-1]
    assert "mv-msg-error" in _status(list(h.traces.replay_example("../../etc/passwd", None, 1.0)))[-1]


def test_scrub_shows_the_run_after_a_step_and_the_baseline_at_that_moment():
    sess = runs.Session()
    sess.spec, sess.ar = spec_run(), ar_run()
    assert recorded.Traces.scrub_range(sess)["maximum"] == 3
    f = recorded.Traces.scrub(sess, 2.0)
    spec_i, ar_i = local.OUTPUTS.index("spec"), local.OUTPUTS.index("ar")
    assert f[spec_i] == view.tokens_html(stream.events_through_step(spec_run(), 2))
    assert f[ar_i] == view.tokens_html(stream.events_until(ar_run(), 0.02)[0])   # step 2 ended at t=0.02
    assert "After step 2" in f[0]
    assert "mv-msg-warn" in recorded.Traces.scrub(None, 1)[0]
    assert recorded.Traces.scrub_range(None)["interactive"] is False


def test_load_errors_clear_the_waiting_pane():
    def load(t, d):
        raise UserError(f"There is no loadable model folder at {t}.")

    h = _handlers(load)
    frames = list(h.run(_values(model=local.CUSTOM, custom_target="/nope"), None))
    spec_i = local.OUTPUTS.index("spec")
    assert "loadable model folder at /nope" in _status(frames)[-1]
    assert "Waiting for the model" not in [f[spec_i] for f in frames if isinstance(f[spec_i], str)][-1]


def test_session_schedule_carries_across_runs():
    sess = runs.Session()
    a = sess.schedules.get("heuristic", "mtp", 4, 16)
    a.start()
    a.update(drafted=4, accepted=4)  # all accepted: +2
    b = sess.schedules.get("heuristic", "mtp", 4, 16)
    assert b is a and b.start() == 6


def test_pair_loader_loads_once_per_pair_however_it_is_written(tmp_path):
    calls = []
    (tmp_path / "m").mkdir()

    def load(t, d):
        calls.append((t, d))
        if t == "bad":
            raise UserError("no such model")
        return object()

    loader = service.PairLoader(load)
    spellings = [str(tmp_path / "m"), str(tmp_path / "m") + "/", str(tmp_path) + "//m",
                 str(tmp_path / "m" / ".." / "m")]
    states = [loader.wait(PairSpec(s), timeout=5) for s in spellings]
    assert len(calls) == 1 and all(s.pair is states[0].pair for s in states)
    assert pairs.pair_key("tiny", None) == pairs.pair_key(
        *__import__("mtp_viz.sources.presets").sources.presets.resolve("tiny"))
    bad = loader.wait(PairSpec("bad"), timeout=5)
    assert bad.status == "error" and bad.message == "no such model"


def test_pair_loader_is_bounded_and_says_what_it_unloaded(tmp_path):
    loader = service.PairLoader(lambda t, d: object(), max_pairs=1)
    for name in ("a", "b"):
        (tmp_path / name).mkdir()
        assert loader.wait(PairSpec(str(tmp_path / name)), timeout=5).status == "ready"
    assert len(loader.loaded()) == 1
    gone = loader.state(PairSpec(str(tmp_path / "a")))
    assert gone.status == "unloaded" and "unloaded" in gone.message
    assert loader.wait(PairSpec(str(tmp_path / "a")), timeout=5).status == "ready"  # loads again


def test_failed_loads_are_remembered_only_a_few_at_a_time(tmp_path, monkeypatch):
    """Each bad name a visitor sends ends as a failed load; the loader keeps the newest
    few sentences, not one per name for ever."""
    monkeypatch.setattr(service, "MAX_ENDED", 3)

    def fail(target, drafter):
        raise UserError(f"No model at {target[-2:]}.")

    loader = service.PairLoader(fail)
    for i in range(10):
        (tmp_path / f"m{i}").mkdir()
        st = loader.wait(PairSpec(str(tmp_path / f"m{i}")), timeout=5)
        assert st.status == "error" and st.message == f"No model at m{i}."
    assert len(loader._states) == len(loader._done) == 3
    assert loader.state(PairSpec(str(tmp_path / "m0"))).status == "idle"     # forgotten: loads on next run


def test_parallel_starts_of_one_pair_load_it_once():
    calls, gate = [], threading.Event()

    def load(t, d):
        calls.append(t)
        gate.wait(5)
        return object()

    loader = service.PairLoader(load)
    threads = [threading.Thread(target=loader.start, args=(PairSpec("tiny"),)) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    gate.set()
    assert loader.wait(PairSpec("tiny"), timeout=5).status == "ready" and calls == ["tiny"]


def test_allow_list_refuses_without_loading(tmp_path):
    calls = []
    h = _handlers(lambda t, d: calls.append(t) or FakePair(), allow="tiny")
    assert set(h.presets) == {"tiny"}
    for custom in ("google/gemma-4-E2B-it", "/root", str(tmp_path), "~"):
        msgs = _status(list(h.run(_values(model=local.CUSTOM, custom_target=custom), None)))
        assert msgs[-1] == view.message_html("This deployment only serves the models in its picker.",
                                             level="error")
    assert calls == []
    assert "Done." in _status(list(h.run(_values(max_new_tokens=8), None)))[-1]


def test_user_message_matches_types_not_names():
    class UserErrorLookalike(Exception):
        pass
    assert service.user_message(UserError("One sentence.")) == "One sentence."
    assert "UserErrorLookalike" in service.user_message(UserErrorLookalike("/etc/passwd"))
    assert "/etc/passwd" not in service.user_message(UserErrorLookalike("/etc/passwd"))


def test_default_pair_and_caps_from_environment(monkeypatch):
    allow = deploy.AllowList("")
    monkeypatch.setenv("MTP_VIZ_TARGET", "/models/t")
    monkeypatch.setenv("MTP_VIZ_DRAFTER", "/models/d")
    assert deploy.default_pair(allow)[:2] == ("/models/t", "/models/d")
    monkeypatch.delenv("MTP_VIZ_TARGET")
    monkeypatch.setattr(deploy, "e2b_cached", lambda: False)
    assert deploy.default_pair(allow)[:2] == ("tiny", None)
    monkeypatch.setattr(deploy, "e2b_cached", lambda: True)
    assert deploy.default_pair(allow)[:2] == deploy.E2B
    monkeypatch.setenv("MTP_VIZ_MAX_NEW_TOKENS_CAP", "32")
    assert deploy.env_cap() == 32
    monkeypatch.setenv("MTP_VIZ_MAX_NEW_TOKENS_CAP", "lots")
    assert deploy.env_cap() == 512


@pytest.mark.parametrize("prompt, cap, sentence", [
    ("w10 \udcff", 4096, "The prompt is not valid UTF-8 text."),
    ("w10 " * 2100, 4096, "exceeds the model&#x27;s context of 2048 tokens"),
    ("w10 " * 200, 100, "this deployment takes at most 100"),
])
def test_handlers_refuse_what_only_the_model_can_check(real_pair, prompt, cap, sentence):
    loader = service.PairLoader(lambda t, d: real_pair)
    h = local.Handlers(loader, deploy.presets(loader.allow), ("tiny", None), cap=16, prompt_cap=cap)
    msgs = _status(list(h.run(_values(prompt=prompt, chat=False), None)))
    assert sentence in msgs[-1] and "mv-msg-error" in msgs[-1]
    assert "Done." in _status(list(h.run(_values(prompt="w10 w11 w12", chat=False), None)))[-1]


def test_dtype_from_environment(monkeypatch):
    monkeypatch.delenv("MTP_VIZ_DTYPE", raising=False)
    assert deploy.env_dtype() is None  # the device's default
    for value, name in (("bf16", "bfloat16"), (" BFloat16 ", "bfloat16"), ("fp32", "float32"), ("", None),
                        ("INT8", "int8"), ("int4", "int4")):  # a precision for both models (int4 where it runs)
        monkeypatch.setenv("MTP_VIZ_DTYPE", value)
        assert deploy.env_dtype() == name, value
    monkeypatch.setenv("MTP_VIZ_DTYPE", "int3")
    with pytest.raises(UserError) as e:
        deploy.env_dtype()
    assert str(e.value) == "Unknown MTP_VIZ_DTYPE 'int3'; use float32, bfloat16, float16, int8 or int4."


def test_the_app_refuses_to_start_on_a_bad_dtype(monkeypatch, capsys):
    """Before the default pair loads or anything is served: one line, exit status 2."""
    from mtp_viz.__main__ import main
    monkeypatch.setenv("MTP_VIZ_DTYPE", "float8")
    started = []
    monkeypatch.setattr(service.PairLoader, "start", lambda self, *a: started.append(a))
    assert main(["ui", "--target", "tiny"]) == 2
    assert capsys.readouterr().err.strip() == ("mtp-viz: error: Unknown MTP_VIZ_DTYPE 'float8'; use float32, "
                                               "bfloat16, float16, int8 or int4.")
    assert started == []


def test_the_app_loads_pairs_in_the_dtype_asked_for(monkeypatch):
    monkeypatch.setenv("MTP_VIZ_DTYPE", "bfloat16")
    monkeypatch.setattr(loading, "warm_up", lambda source, top=0: None)  # the load is what is checked
    from mtp_viz.sources import models
    monkeypatch.setattr(models, "set_threads", lambda n: None)  # keep this process's thread count
    pair = loading.load_and_warm("tiny", None)
    assert pair.target.dtype == pair.drafter_model.dtype == torch.bfloat16


def test_frame_rate_from_environment(monkeypatch):
    monkeypatch.delenv("MTP_VIZ_FRAMES_PER_SECOND", raising=False)
    assert deploy.env_frame_interval() == runs.FRAME_INTERVAL == 1 / 4
    for value, interval in (("20", 1 / 20), ("100", 1 / 30), ("0", 1.0), ("many", 1 / 4)):
        monkeypatch.setenv("MTP_VIZ_FRAMES_PER_SECOND", value)
        assert deploy.env_frame_interval() == interval, value


def test_a_loaded_pair_is_warmed_through_the_whole_app_path():
    """The load's warm-up is a comparison as Run makes it (both modes in turns, top-k
    recorded, every frame and chart built), so no first call lands in a timed run."""
    pair = FakePair()
    loading.warm_up(pair, top=5)
    assert [(m, s.top, s.max_new_tokens) for m, s in pair.calls] == [
        ("speculative", 5, 8), ("autoregressive", 5, 8)]


def test_measure_puts_its_result_on_the_measure_tab_too():
    """Measure's result fills ``#measure-result`` (the Measure tab, where its numbers are
    read) as well as the badge on Decode: the same sentence, median and range."""
    from mtp_viz.sources.models import load_pair
    h = _handlers(lambda t, d: load_pair(t, d))
    frames = list(h.measuring.measure(_values(max_new_tokens=8), 2, None, "none", ""))
    measured, compare = (frames[-1][local.OUTPUTS.index(k)] for k in ("measured", "compare"))
    assert isinstance(measured, str) and 'id="' not in measured   # ids stay unique: #compare is Decode's
    assert "median of 2 repeats" in measured and "speculative ran at" in measured
    speedup = re.search(r'data-speedup="([\d.]+)"', compare).group(1)
    assert f'data-speedup="{speedup}"' in measured   # the same figure on both tabs
    # a Run leaves it: it is the last Measure's, not the run's
    assert all(isinstance(f[local.OUTPUTS.index("measured")], dict) for f in h.run(_values(), None))


def test_profile_on_the_measure_tab_times_the_picked_pair_and_draws_its_prediction():
    """Profile (#profile-run) passes the gate as Run does, times the loaded pair's forwards on
    its engine with the real profile (mtp_viz.measure.profile.study), and shows the same
    blocks as the CLI's table, escaped, with the machine it ran on; Stop ends it in one sentence."""
    from mtp_viz.app.handlers.profile import REPEATS
    from mtp_viz.sources.models import load_pair
    h = _handlers(lambda t, d: load_pair(t, d))
    frames = list(h.profiling.profile(_values(max_new_tokens=8), None))
    status, result, figure, sess = frames[-1]
    assert "Profiled in" in status and "Machine" not in status and "on this machine:" in status
    assert '<table class="mv-profile">' in result and "What each forward costs (ms)" in result
    assert f"medians of {REPEATS} repeats" in result and "acceptance set to 0.5; every forward real" in result
    curves = [t for t in figure.data if t.mode == "lines"]
    assert len(curves) == 8 and all(max(t.y) > 0 for t in curves)   # γ = 1 … 8 on the eager engine
    measured = next(t for t in figure.data if t.mode == "markers")
    assert len(measured.x) == 3 and all(0 <= a <= 1 for a in measured.x)
    # Stop pressed while it profiles: one sentence, and the engine's turn free for the next press
    gen = h.profiling.profile(_values(max_new_tokens=8), sess)
    for status, *_ in gen:
        if "Profiling on the" in status:
            sess.stop.set()   # what #profile-stop does (Handlers.stop), before the first timed part
            break
    status = next(gen)[0]
    assert "The profile was stopped." in status and "mv-msg-error" in status
    assert "Profiled in" in list(h.profiling.profile(_values(max_new_tokens=8), sess))[-1][0]


def test_profile_refuses_a_bad_field_in_one_sentence():
    from mtp_viz.sources.models import load_pair
    h = _handlers(lambda t, d: load_pair(t, d))
    frames = list(h.profiling.profile(_values(max_new_tokens=32), None))
    assert len(frames) == 1 and "between 1 and 16" in frames[0][0] and "mv-msg-error" in frames[0][0]
