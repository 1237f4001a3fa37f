"""Pure view functions on hand-built event streams (no torch, no gradio)."""
from __future__ import annotations

import re
import subprocess
import sys

import pytest

from mtp_viz.analysis import stream
from mtp_viz.engine.events import Done, Drafted, Step, Token
from mtp_viz.views import charts, stats, tokens as view
from streams import EVIL, ar_run, spec_run


def kinds(h):
    return re.findall(r'data-kind="(\w+)"(?: data-bonus="(\w+)")?', h)


def test_tokens_html_kinds_in_stream_order():
    h = view.tokens_html(spec_run())
    got = kinds(h)
    assert got[:4] == [("accepted", "")] * 3 + [("bonus", "extension")]
    assert got[4:9] == [("accepted", "")] * 2 + [("rejected", "")] * 3
    assert got[9] == ("bonus", "correction")
    assert [k for k, _ in got].count("drafted") == 0       # verified drafts are not pending
    assert h.count('class="tok') == len(got)


def test_model_text_is_escaped():
    h = view.tokens_html(spec_run()) + view.tokens_html(ar_run())
    assert "<img" not in h and "onerror=\"alert" not in h
    assert "&lt;img src=x onerror=&quot;alert(1)&quot;&gt;" in h


def test_whitespace_and_special_tokens_visible():
    h = view.tokens_html(spec_run())
    assert '<span class="nl">↵</span>\n' in h            # newline kept (pre-wrap) and marked
    assert '>    </span>' in h                            # indentation kept verbatim
    assert 'class="tok special"' in h and "&lt;eos&gt;" in h
    assert "⟨5⟩" in view.token_span("token", "", 5)       # empty piece shows its id


def test_pending_drafts_shown_before_verification():
    ev = spec_run()[:1] + [Drafted(step=1, index=i, token_id=i, text=f"w{i}") for i in range(3)]
    assert [k for k, _ in kinds(view.tokens_html(ev))] == ["drafted"] * 3


def test_incremental_renderer_matches_pure_function():
    ev = spec_run()
    pane = view.PaneRenderer()
    for i, e in enumerate(ev):
        pane.add(e)
        assert pane.html() == view.tokens_html(ev[: i + 1], placeholder=pane.placeholder)


def test_placeholder_when_empty():
    assert 'class="tok' not in view.tokens_html([], placeholder="nothing yet")
    assert "nothing yet" in view.tokens_html([], placeholder="nothing yet")


def test_run_stats_and_stats_html():
    s = stats.run_stats(spec_run())
    assert (s.tokens, s.forwards, s.drafted, s.accepted) == (8, 3, 12, 5)
    assert s.tau == pytest.approx((8 - 1) / (3 - 1))   # τ: the prefill's forward and token left out
    assert s.done and s.seconds == pytest.approx(0.03)
    h = stats.stats_html(s)
    for word in ("tokens", "target forwards", "tokens/s", "elapsed"):
        assert word in h
    live = stats.run_stats(spec_run()[:5], now=0.5)
    assert not live.done and live.seconds == 0.5
    assert "mv-precision" not in h  # a source that does not say (a server, an older trace) shows none


def test_the_stats_line_names_what_each_model_ran_in():
    from dataclasses import replace
    run = spec_run()
    run[0] = replace(run[0], settings={**run[0].settings, "target_precision": "int8",
                                       "drafter_precision": "<b>bf16"})
    h = stats.stats_html(stats.run_stats(run))
    assert 'data-target-precision="int8"' in h and "target <b>int8</b> · drafter <b>&lt;b&gt;bf16</b>" in h
    ar = ar_run()
    ar[0] = replace(ar[0], settings={"target_precision": "bfloat16", "drafter_precision": None})
    h = stats.stats_html(stats.run_stats(ar))
    assert "target <b>bfloat16</b></span>" in h and "· drafter" not in h
    other = stats.run_stats(ar_run(texts=("def", " f", "X", ")", ":", "\n", EVIL, "<eos>")))
    assert "in bfloat16, verifying several tokens" in stats.identity_badge(stats.run_stats(ar), other)


def test_compare_identity_and_speedup_hooks():
    spec, same = stats.run_stats(spec_run()), stats.run_stats(ar_run())
    h = stats.compare_html(spec, same, greedy=True)
    assert "token-identical" in h and "one run each, in turns, 1 torch thread" in h
    x = spec.tokens_per_second / same.tokens_per_second
    hooks = dict(re.findall(r'data-([a-z-]+)="([^"]*)"', h.split(">", 1)[0]))
    assert h.startswith('<div id="compare"') and float(hooks["speedup"]) == pytest.approx(x, abs=1e-4)
    assert float(hooks["spec-tps"]) == pytest.approx(spec.tokens_per_second, abs=1e-3)
    assert float(hooks["ar-tps"]) == pytest.approx(same.tokens_per_second, abs=1e-3)
    assert hooks["basis"] == "single run" and hooks["threads"] == "1"
    assert "faster" not in h  # one run each names no winner
    other = stats.run_stats(ar_run(texts=("def", " f", "X", ")", ":", "\n", EVIL, "<eos>")))
    h = stats.compare_html(spec, other, greedy=True)
    assert "first differ at token 3" in h and "<img" not in h
    assert "identical" not in stats.compare_html(spec, other, greedy=False)
    assert "data-speedup" not in stats.compare_html(spec, stats.run_stats(ar_run()[:3]), greedy=True)


def test_measurement_names_a_winner_only_when_every_repeat_agrees():
    from mtp_viz.measure.compare import Measurement
    m = Measurement((1.8, 1.9, 2.0), 200.0, 105.0, 1)
    h = stats.measurement_html(m)
    assert "speculative ran at <b>×1.90</b> the speed of the eager engine's own plain decoding" in h
    assert "faster in every repeat" in h and "median of 3 repeats" in h and 'data-basis="median of 3"' in h
    assert " faster than" not in h   # one wording on every surface: "ran at ×x the speed of"
    assert m.spread == pytest.approx(2.0 / 1.8)
    noisy = stats.measurement_html(Measurement((0.9, 1.05, 1.2), 100.0, 95.0, 1))
    assert "too close to call" in noisy and "faster" not in noisy
    assert "slower in every repeat" in stats.measurement_html(Measurement((0.7, 0.8, 0.9), 80.0, 100.0, 2))
    one = stats.measurement_html(Measurement((1.5,), 150.0, 100.0, 1))
    assert "no call (one repeat)" in one and "faster" not in one


def test_theory_panel_escapes_and_shows_noisy_v():
    from mtp_viz.analysis.metrics import theory_check
    from mtp_viz.views import theory as panels
    spec = spec_run()
    chk = theory_check(spec, ar_run(dt=0.01))
    out = panels.theory_panel_html(chk)
    assert "mtp-theory" in out and f"{chk.alpha:.3f}" in out and "γ*" in out
    assert "timing noise" in out  # verification measured at 0.005 s vs 0.01 s per AR step: v < 1
    assert "No drafted tokens" in panels.theory_panel_html(theory_check(ar_run()))


def test_one_best_draft_length_on_the_measure_tab():
    """The theory panel's γ* is the What-if's best row, never a second draft length beside it
    (it once named 6 from a single α above a What-if marking 4)."""
    import re

    from mtp_viz.analysis.metrics import theory_check
    from mtp_viz.analysis.whatif import what_if
    from mtp_viz.views import explain, theory as panels
    chk = theory_check(spec_run(), ar_run(dt=0.05))
    w = what_if(chk)
    row = re.search(r"best draft length γ\*</td><td></td><td>(\d+) \(×([\d.]+) estimated: the What-if",
                    panels.theory_panel_html(chk))
    assert row and int(row.group(1)) == w.best and float(row.group(2)) == pytest.approx(w.best_row.speedup, abs=0.006)
    table = explain.what_if_html(w)
    assert table.count("★") == 1 and f'data-best="{w.best}"' in table


def test_legend_has_every_kind():
    got = kinds(view.legend_html())
    assert {k for k, _ in got} == {"drafted", "accepted", "rejected", "bonus", "token"}
    assert {b for k, b in got if k == "bonus"} == {"correction", "extension"}


def test_message_html_escapes():
    assert "<b>" not in view.message_html("<b>bad</b>", level="error")
    assert view.message_html("") == ""


def test_events_until_replays_on_recorded_times():
    ev = spec_run()
    shown, done = stream.events_until(ev, 0.015)
    assert not done and sum(isinstance(e, Step) for e in shown) == 1
    assert not any(getattr(e, "step", 0) == 2 for e in shown)
    shown, done = stream.events_until(ev, 1.0)
    assert done and shown == ev
    shown, _ = stream.events_until(ar_run(), 0.035)
    assert sum(isinstance(e, Token) for e in shown) == 3


def test_events_through_step_is_the_run_after_that_step():
    ev = spec_run()
    after_2 = stream.events_through_step(ev, 2)
    assert isinstance(after_2[-1], Step) and after_2[-1].step == 2
    assert max(e.step for e in after_2 if hasattr(e, "step")) == 2 and not isinstance(after_2[-1], Done)
    assert stream.events_through_step(ev, 3) == ev and stream.events_through_step(ev, 0) == ev[:1]
    assert sum(isinstance(e, Token) for e in stream.events_through_step(ar_run(), 4)) == 4


def test_figures_from_events():
    ev = spec_run()
    acc = charts.acceptance_figure(ev)
    assert list(acc.data[0].y) == [1.0, 0.4, 0.0]
    assert list(acc.data[1].y) == pytest.approx([1.0, 5 / 8, 5 / 12])
    dl = charts.draft_length_figure(ev)
    assert list(dl.data[1].y) == [3, 5, 4]
    assert "all accepted: +2" in dl.data[1].hovertext[1] and "rejection: -1" in dl.data[1].hovertext[2]
    tpf = charts.tau_figure(ev)
    assert list(tpf.data[0].y) == [4, 3, 1]
    pos = charts.position_figure(ev)
    assert list(pos.data[0].y) == [pytest.approx(2 / 3), 1.0, 0.5, None, None]
    tim = charts.timing_figure(ev, ar_run())
    assert [t.name for t in tim.data] == ["draft", "verify", "autoregressive"]
    figs = charts.all_figures(ev, ar_run())
    assert set(figs) >= {"acceptance-plot", "draft-length-plot"}


def test_empty_figures_have_a_hint():
    for fig in charts.all_figures([]).values():
        assert not fig.data and fig.layout.annotations


def test_app_modules_do_not_import_torch():
    code = ("import sys, mtp_viz.app.page.layout, mtp_viz.views.tokens, mtp_viz.app.runtime.service, "
            "mtp_viz.app.runtime.runs, "
            "mtp_viz.app.handlers.local, mtp_viz.views.theory; "
            "assert 'torch' not in sys.modules, 'torch imported'")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120,
                   env={"GRADIO_ANALYTICS_ENABLED": "False", "PATH": "/usr/bin:/bin"})


def test_a_traces_reason_and_cut_reach_the_draft_length_hover_escaped():
    """plotly reads tags in hover text; a trace's schedule reason and cut are anyone's."""
    from mtp_viz.engine.events import Start
    evil = "<img src=x onerror=alert(1)>"
    events = [Start("speculative", 3), Step(1, 0, 0, new_tokens=1, next_draft_tokens=4, reason=evil),
              Step(2, 4, 2, new_tokens=3, cut=evil), Step(3, 4, 4, new_tokens=5)]
    fig = charts.draft_length_figure(events)
    hover = " ".join(fig.to_dict()["data"][1]["hovertext"])
    assert "<img" not in hover and hover.count("&lt;img src=x onerror=alert(1)&gt;") == 2


def test_what_waits_for_data_says_so():
    """Before a run the badges' place holds a sentence (not a lone ⓘ), and before a sweep
    each Traffic chart says it waits for one, with no empty axis; with rows it draws them."""
    from types import SimpleNamespace

    from mtp_viz.views import traffic
    empty = stats.compare_html(stats.RunStats(), stats.RunStats(), greedy=True)
    assert stats.WAITING in empty and 'data-explain="compare"' in empty
    for fig in traffic.figures([]):
        assert fig.layout.annotations[0].text == traffic.WAITING and fig.layout.yaxis.visible is False
    rows = [SimpleNamespace(server=s, concurrency=c, speedup=1.2, tpot_ratio=1.1, tokens_per_second=50.0,
                            acceptance_rate=0.6) for s in ("speculative", "baseline") for c in (1, 2)]
    assert all(not fig.layout.annotations and fig.data for fig in traffic.figures(rows))
