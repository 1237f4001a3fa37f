"""Step mode (the engine's pause hook, the gate, the captions) and the run exports,
without a browser: the real engine on a small random Gemma 4 pair."""
from __future__ import annotations

import csv
import io
import re
import threading
import time

import pytest

from factories import gemma_assistant, gemma_target, word_tokenizer
from mtp_viz.app.runtime import runs
from mtp_viz.engine.events import Bonus, Done, Drafted, Rejected, Start, Step
from mtp_viz.sources.local import LocalSource
from mtp_viz.sources.settings import RunSettings
from mtp_viz.views import captions, charts, export, tokens as view
from streams import EVIL, ar_run, spec_run

PROMPT = " ".join(f"w{i}" for i in range(10, 30))
KW = dict(mode="speculative", max_new_tokens=24, draft_tokens=4, chat=False)


@pytest.fixture(scope="module")
def pair():
    from mtp_viz.sources.pair import ModelPair
    return ModelPair(gemma_target(layers=4), gemma_assistant(), word_tokenizer(), "random", "random", "cpu")


def test_pause_comes_after_each_draft_and_verification_and_leaves_the_clock(pair):
    phases, held = [], []

    def pause(phase):
        t = time.perf_counter()
        phases.append(phase)
        time.sleep(0.02)
        held.append(time.perf_counter() - t)

    plain = list(pair.generate(PROMPT, **KW))
    t = time.perf_counter()
    paused = list(pair.generate(PROMPT, pause=pause, **KW))
    wall = time.perf_counter() - t
    ids = [e.generated_ids for e in (plain[-1], paused[-1])]
    assert ids[0] == ids[1]                                     # pausing changes no token
    steps = [e for e in paused if isinstance(e, Step)]
    drafting = [s for s in steps[1:] if s.draft_tokens]
    # after the prefill and each later step but the last: "verified"; after each draft: "drafted"
    assert phases.count("verified") == len(steps) - 1 and phases.count("drafted") == len(drafting)
    assert phases[0] == "verified" and all(a != b for a, b in zip(phases, phases[1:]))
    done = paused[-1]
    assert isinstance(done, Done) and sum(held) > 0.2
    # the engine's clock runs inside the wall clock and skips every pause
    assert done.seconds <= wall - sum(held)
    assert [s.t for s in steps] == sorted(s.t for s in steps) and steps[-1].t <= done.seconds


def _wait(cond, timeout=60.0):
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


def test_gate_waits_for_next_stop_or_switch_off():
    stop = threading.Event()
    gate = runs.StepGate(stop, on=True)
    assert gate.advance() is False                  # nothing waits: the press is ignored
    for release in (gate.advance, lambda: setattr(gate, "on", False), stop.set):
        gate.on = True
        t = threading.Thread(target=gate, args=("drafted",))
        t.start()
        _wait(lambda: gate.waiting == "drafted")
        time.sleep(0.2)
        assert t.is_alive()                         # it waits for as long as nobody acts
        release()
        t.join(5)
        assert not t.is_alive() and gate.waiting == ""
    off = runs.StepGate(threading.Event(), on=False)
    off("verified")                                 # step mode off: no wait at all


def test_gate_stops_a_run_left_waiting():
    stop = threading.Event()
    gate = runs.StepGate(stop, on=True, idle=0.2)
    gate("verified")
    assert stop.is_set() and gate.timed_out


def test_a_run_in_step_mode_waits_and_next_advances(pair):
    sess = runs.Session()
    sess.new_run(step_mode=True)
    s = RunSettings(prompt=PROMPT, max_new_tokens=400, chat=False)
    frames: list = []

    def consume():
        for f in runs.compare_frames(LocalSource(pair), s, sess, frame_interval=0.01):
            frames.append(f)
    th = threading.Thread(target=consume)
    th.start()
    try:
        captions_seen = []
        for phase, words in (("verified", "read the prompt"), ("drafted", "the drafter proposed"),
                             ("verified", "checked them in one forward pass")):
            _wait(lambda: sess.gate.waiting == phase)
            _wait(lambda: any(words in (f.caption or "") for f in list(frames)))
            time.sleep(0.2)                             # the consumer drains what came before the pause
            n, m = len(sess.spec), len(sess.ar)
            time.sleep(0.5)
            assert (len(sess.spec), len(sess.ar)) == (n, m)  # paused: nothing new in either pane
            captions_seen.append(captions.caption(sess.spec))
            if phase == "drafted":
                assert isinstance(sess.spec[-1], Drafted)
            sess.gate.advance()
        sess.stop.set()
        th.join(30)
        assert not th.is_alive()
    finally:
        sess.stop.set()
        th.join(30)
    done = next(e for e in sess.spec if isinstance(e, Done))
    assert done.stop_reason == "stopped" and done.new_tokens < 400
    # the baseline takes its turns between the paused steps, and Stop ends it too
    ar_done = next(e for e in sess.ar if isinstance(e, Done))
    assert ar_done.stop_reason == "stopped" and ar_done.new_tokens < 400
    assert "Stopped." in frames[-1].status
    # the step's own numbers are in its caption
    step2 = [e for e in sess.spec if isinstance(e, Step) and e.step == 2][0]
    assert f"proposed {step2.draft_tokens} token" in captions_seen[2]


def test_caption_of_a_partial_acceptance_names_the_rejected_draft():
    ev = spec_run()
    # step 2 of spec_run: 5 drafts, 2 kept, a correction (EVIL)
    upto = ev[:next(i for i, e in enumerate(ev) if isinstance(e, Step) and e.step == 2) + 1]
    text = captions.caption(upto)
    assert text.startswith("Step 2: the drafter proposed 5 tokens in ")
    assert "it kept 2, rejected the third (the 2 tokens drafted after it went too)" in text
    assert "in its place" in text
    html_ = captions.caption_html(upto)
    assert "<script" not in html_ and "&lt;" in html_            # model text is escaped
    pending = upto + [Drafted(step=3, index=0, token_id=5, text="a"), Drafted(step=3, index=1, token_id=6,
                                                                            text=" ")]
    assert captions.caption(pending) == ("Step 3: the drafter proposed 2 tokens: \u201ca\u201d, a space. "
                                         "Next, the target checks them all in one forward pass.")
    whole = captions.caption(ev)
    assert "kept 0, rejected the first" in whole and whole.endswith("Done: 8 tokens in 3 target forwards, 0.03 s.")
    first = captions.caption(ev[:next(i for i, e in enumerate(ev) if isinstance(e, Step)) + 1])
    assert "kept all of them and added a token of its own" in first
    assert captions.caption(ar_run()[:3]).startswith("Step 1: the target wrote \u201cdef\u201d in one forward pass")
    assert captions.caption([]) == "" and captions.ordinal(9) == "9th"


def test_steps_csv_has_a_row_per_step_with_its_numbers():
    rows = list(csv.DictReader(io.StringIO(export.steps_csv(spec_run(), ar_run()))))
    steps = [e for e in spec_run() + ar_run() if isinstance(e, Step)]
    assert tuple(rows[0]) == export.CSV_COLUMNS and len(rows) == len(steps)
    for row, e in zip(rows, steps):
        assert int(row["step"]) == e.step and int(row["accepted"]) == e.accepted
        assert int(row["rejected"]) == e.draft_tokens - e.accepted
        assert float(row["verify_ms"]) == pytest.approx(e.verify_seconds * 1000, abs=1e-3)
    assert {r["mode"] for r in rows} == {"speculative", "autoregressive"}


def test_the_exported_page_is_self_contained_and_escaped():
    page = export.page_html(spec_run(), ar_run(), css=".x{}")
    assert page.startswith("<!doctype html>") and page.rstrip().endswith("</html>")
    assert not re.search(r"<(script|link)[^>]+(src|href)=", page)      # nothing fetched
    assert page.count("Plotly.newPlot") == len(charts.CHARTS) == 6 and "plotly.js" in page.lower()
    assert view.tokens_html(spec_run(), placeholder="Not run.") in page
    assert EVIL not in page and view.legend_html() in page


def test_downloads_keep_only_the_newest_files():
    d = export.Downloads(keep=3)
    paths = [d.path("x.txt") for _ in range(5)]
    for p in paths:
        if p.parent.exists():
            p.write_text("x")
    assert [p.parent.exists() for p in paths] == [False, False, True, True, True]
    assert all(p.name == "x.txt" for p in paths)


def test_captions_cover_events_of_every_kind():
    """No event kind breaks the caption: a run ending in a rejection, a bonus or a cut."""
    ev = [Start(mode="speculative", prompt_tokens=3),
          Step(step=1, draft_tokens=0, accepted=0, new_tokens=1),
          Drafted(step=2, index=0, token_id=1, text="x"),
          Rejected(step=2, index=0, token_id=1, text="x"),
          Bonus(step=2, token_id=2, text="<eos>", index=0, kind="correction"),
          Step(step=2, draft_tokens=1, accepted=0, new_tokens=1, cut="eos")]
    text = captions.caption(ev)
    assert "rejected the first, and wrote its own token \u201c<eos>\u201d" in text
    assert "end-of-sequence" in text
