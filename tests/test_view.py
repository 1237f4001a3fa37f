"""Pure view functions on hand-built event streams, and the app's run sequence with a
fake model pair (no torch, no gradio)."""
from __future__ import annotations

import re
import subprocess
import sys

import pytest

from mtp_viz import charts, service, view
from mtp_viz.events import Accepted, Bonus, Done, Drafted, Error, Rejected, Start, Step, Token

EVIL = '<img src=x onerror="alert(1)">'


def spec_step(step, drafts, n_ok, bonus, t, *, reason="constant", next_len=None):
    """Events of one verification step: ``drafts`` texts, first ``n_ok`` accepted."""
    ev = [Drafted(step=step, index=i, token_id=100 + i, text=d, q=0.9) for i, d in enumerate(drafts)]
    ev += [Accepted(step=step, index=i, token_id=100 + i, text=d) for i, d in enumerate(drafts[:n_ok])]
    ev += [Rejected(step=step, index=i, token_id=100 + i, text=d) for i, d in enumerate(drafts) if i >= n_ok]
    if bonus is not None:
        kind = "extension" if n_ok == len(drafts) else "correction"
        ev.append(Bonus(step=step, token_id=7, text=bonus, index=n_ok, kind=kind))
    ev.append(Step(step=step, draft_len=len(drafts), accepted=n_ok, new_tokens=n_ok + (bonus is not None),
                   draft_seconds=0.002, verify_seconds=0.005, next_draft_len=next_len or len(drafts),
                   reason=reason, t=t))
    return ev


def spec_run():
    ev = [Start(mode="speculative", prompt_tokens=5, settings={"draft_tokens": 3})]
    ev += spec_step(1, ["def", " f", "("], 3, ")", 0.01, reason="all accepted: +2", next_len=5)
    ev += spec_step(2, [":", "\n", "    ", "x", "y"], 2, EVIL, 0.02, reason="rejection: -1", next_len=4)
    ev += spec_step(3, ["a", "b", "c", "d"], 0, "<eos>", 0.03)
    ev.append(Done(new_tokens=8, target_forwards=3, seconds=0.03, stop_reason="eos"))
    return ev


def ar_run(texts=("def", " f", "(", ")", ":", "\n", EVIL, "<eos>"), dt=0.01):
    ev = [Start(mode="autoregressive", prompt_tokens=5)]
    for i, tx in enumerate(texts, 1):
        tid = {"def": 100, " f": 101, "(": 102, ")": 7, ":": 100, "\n": 101}.get(tx, 7)
        ev += [Token(step=i, token_id=tid, text=tx, t=i * dt),
               Step(step=i, draft_len=0, accepted=0, new_tokens=1, verify_seconds=dt, t=i * dt)]
    ev.append(Done(new_tokens=len(texts), target_forwards=len(texts), seconds=len(texts) * dt))
    return ev


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
    s = view.run_stats(spec_run())
    assert (s.tokens, s.forwards, s.drafted, s.accepted) == (8, 3, 12, 5)
    assert s.tokens_per_forward == pytest.approx(8 / 3)
    assert s.done and s.seconds == pytest.approx(0.03)
    h = view.stats_html(s)
    for word in ("tokens", "target forwards", "tokens/s", "elapsed"):
        assert word in h
    live = view.run_stats(spec_run()[:5], now=0.5)
    assert not live.done and live.seconds == 0.5


def test_compare_identity_and_speedup():
    spec, same = view.run_stats(spec_run()), view.run_stats(ar_run())
    h = view.compare_html(spec, same, greedy=True)
    assert "faster" in h and "token-identical" in h
    other = view.run_stats(ar_run(texts=("def", " f", "X", ")", ":", "\n", EVIL, "<eos>")))
    h = view.compare_html(spec, other, greedy=True)
    assert "first differ at token 3" in h and "<img" not in h
    assert "identical" not in view.compare_html(spec, other, greedy=False)
    assert view.compare_html(spec, view.run_stats(ar_run()[:3]), greedy=True) == ""  # not done


def test_legend_has_every_kind():
    got = kinds(view.legend_html())
    assert {k for k, _ in got} == {"drafted", "accepted", "rejected", "bonus", "token"}
    assert {b for k, b in got if k == "bonus"} == {"correction", "extension"}


def test_message_html_escapes():
    assert "<b>" not in view.message_html("<b>bad</b>", level="error")
    assert view.message_html("") == ""


def test_events_until_replays_on_recorded_times():
    ev = spec_run()
    shown, done = view.events_until(ev, 0.015)
    assert not done and sum(isinstance(e, Step) for e in shown) == 1
    assert not any(getattr(e, "step", 0) == 2 for e in shown)
    shown, done = view.events_until(ev, 1.0)
    assert done and shown == ev
    shown, _ = view.events_until(ar_run(), 0.035)
    assert sum(isinstance(e, Token) for e in shown) == 3


def test_figures_from_events():
    ev = spec_run()
    acc = charts.acceptance_figure(ev)
    assert list(acc.data[0].y) == [1.0, 0.4, 0.0]
    assert list(acc.data[1].y) == pytest.approx([1.0, 5 / 8, 5 / 12])
    dl = charts.draft_length_figure(ev)
    assert list(dl.data[1].y) == [3, 5, 4]
    assert "all accepted: +2" in dl.data[1].hovertext[1] and "rejection: -1" in dl.data[1].hovertext[2]
    tpf = charts.tokens_per_forward_figure(ev)
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


class FakePair:
    """Replays hand-built streams; records the settings it was asked for."""

    def __init__(self, fail=None):
        self.calls, self.fail = [], fail

    def generate(self, prompt, *, mode, stop=None, **settings):
        self.calls.append((mode, settings))
        if self.fail:
            raise self.fail
        yield from (spec_run() if mode == "speculative" else ar_run())


def test_compare_frames_runs_speculative_then_autoregressive():
    pair, sess = FakePair(), service.Session()
    frames = list(service.compare_frames(pair, "hi", {"draft_tokens": 3, "temperature": 0.0}, sess,
                                         frame_interval=0))
    assert [m for m, _ in pair.calls] == ["speculative", "autoregressive"]
    assert sess.spec == spec_run() and sess.ar == ar_run()
    first_ar = next(i for i, f in enumerate(frames) if "ar" in f)
    assert all("ar" not in f for f in frames[:first_ar]) and "spec" in frames[first_ar - 2]
    pending = [f["spec"] for f in frames if "spec" in f and 'data-kind="drafted"' in f["spec"]]
    assert pending                                        # drafts shown while being verified
    final = frames[-1]
    assert set(final["figures"]) >= {"acceptance-plot", "draft-length-plot"}
    assert "token-identical" in final["compare"]


def test_compare_frames_turns_failures_into_one_sentence():
    class UserError(Exception):
        pass

    sess = service.Session()
    frames = list(service.compare_frames(FakePair(UserError("Unknown model id 'x'.")), "hi", {}, sess))
    errors = [f["status"] for f in frames if "mv-msg-error" in f.get("status", "")]
    assert errors and "Unknown model id" in errors[0] and "Traceback" not in errors[0]
    assert isinstance(sess.spec[-1], Error) and not sess.ar


def test_pair_loader_loads_once_and_reports_errors():
    calls = []

    def load(t, d):
        calls.append((t, d))
        if t == "bad":
            raise ValueError("no such model")
        return object()

    loader = service.PairLoader(load)
    a = loader.wait("tiny", None, timeout=5)
    b = loader.wait("tiny", None, timeout=5)
    assert a.status == "ready" and a.pair is b.pair and calls == [("tiny", None)]
    bad = loader.wait("bad", None, timeout=5)
    assert bad.status == "error" and "no such model" in bad.message


def test_default_pair_from_environment(monkeypatch):
    monkeypatch.setenv("MTP_VIZ_TARGET", "/models/t")
    monkeypatch.setenv("MTP_VIZ_DRAFTER", "/models/d")
    assert service.default_pair()[:2] == ("/models/t", "/models/d")
    monkeypatch.delenv("MTP_VIZ_TARGET")
    monkeypatch.setattr(service, "e2b_cached", lambda: False)
    assert service.default_pair()[:2] == ("tiny", None)
    monkeypatch.setattr(service, "e2b_cached", lambda: True)
    assert service.default_pair()[:2] == service.E2B


def test_cap_from_environment(monkeypatch):
    monkeypatch.setenv("MTP_VIZ_MAX_NEW_TOKENS_CAP", "32")
    assert service.env_cap() == 32
    monkeypatch.setenv("MTP_VIZ_MAX_NEW_TOKENS_CAP", "lots")
    assert service.env_cap() == 512


def test_app_modules_do_not_import_torch():
    code = ("import sys, mtp_viz.ui, mtp_viz.view, mtp_viz.service; "
            "assert 'torch' not in sys.modules, 'torch imported'")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120,
                   env={"GRADIO_ANALYTICS_ENABLED": "False", "PATH": "/usr/bin:/bin"})


def test_fast_steps_share_frames_but_the_last_frame_is_complete():
    sess = service.Session()
    frames = list(service.compare_frames(FakePair(), "hi", {"draft_tokens": 3}, sess, frame_interval=60))
    spec = [f["spec"] for f in frames if "spec" in f]
    assert len(spec) <= 2 and spec[-1] == view.tokens_html(sess.spec)  # first drafts, then the end


def _run_args(prompt="hi", key="tiny", ct="", cd=""):
    return (prompt, key, ct, cd, 32, 3, "constant", "mtp", "greedy", 0.8, 0.95, 0, True, True)


def _status_texts(frames):
    from mtp_viz import ui
    i = ui.SLOTS.index("status")
    return [f[i] for f in frames if isinstance(f[i], str)]


def test_handlers_turn_user_errors_into_sentences():
    from mtp_viz import ui

    def load(t, d):
        raise ValueError(f"There is no model folder at {t}")

    h = ui.Handlers(service.PairLoader(load), cap=64)
    assert "Type a prompt first" in _status_texts(list(h.run(*_run_args(prompt="  "))))[-1]
    assert "custom target" in _status_texts(list(h.run(*_run_args(key=ui.CUSTOM))))[-1]
    last = _status_texts(list(h.run(*_run_args(key=ui.CUSTOM, ct="/nope"))))[-1]
    assert "mv-msg-error" in last and "no model folder at /nope" in last


def test_handlers_run_streams_both_panes_and_caps_tokens():
    from mtp_viz import ui

    pair = FakePair()
    h = ui.Handlers(service.PairLoader(lambda t, d: pair), cap=16)
    frames = list(h.run(*_run_args()))
    assert pair.calls[0][1]["max_new_tokens"] == 16            # 32 asked, capped
    sess = frames[0][len(ui.SLOTS)]
    assert isinstance(sess, service.Session) and sess.spec and sess.ar
    spec_i, ar_i = ui.SLOTS.index("spec"), ui.SLOTS.index("ar")
    assert 'data-kind="accepted"' in [f[spec_i] for f in frames if isinstance(f[spec_i], str)][-1]
    assert 'data-kind="token"' in [f[ar_i] for f in frames if isinstance(f[ar_i], str)][-1]
    replay = list(ui.Handlers.replay(sess, 1000.0))
    assert "Replay done" in _status_texts(replay)[-1]


def test_examples_from_either_prompt_suite_shape(tmp_path):
    from mtp_viz import ui

    p = tmp_path / "prompts.json"
    p.write_text('{"prompts": [{"category": "code", "title": "Sort", "text": "Sort a list."}]}')
    assert ui.load_examples(p) == [("code · Sort", "Sort a list.")]
    p.write_text('{"chat": ["Hello there"]}')
    assert ui.load_examples(p) == [("chat · Hello there", "Hello there")]
    assert ui.load_examples(tmp_path / "missing.json")             # built-in fallback
