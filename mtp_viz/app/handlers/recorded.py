"""Handlers of recorded runs: Race replay, the scrubber, traces (upload, examples,
download) and the exports. The session's recorded events are all they need: no model.

Handlers build *frames* (:class:`mtp_viz.views.frame.Frame`) and return them as the
page's outputs list (:func:`.frames.outputs`), leaving the parts a frame does not set unchanged.

A trace is a visitor's file, so reading one is bounded (:func:`read_trace`): a file over
:data:`MAX_UPLOAD_BYTES` (the reader's own :data:`~mtp_viz.sources.trace.MAX_BYTES`, also
the page's upload limit) is refused by its size, unread; at most :data:`MAX_PARSES`
traces are parsed at once in the process, and a visitor past them sees that the trace
waits, for :data:`PARSE_WAIT` seconds at most, then one sentence.
"""
from __future__ import annotations

import json
import os
import threading
import time
from typing import Any, Generator

import gradio as gr

from mtp_viz.analysis import stream
from mtp_viz.app.runtime import runs
from mtp_viz.errors import UserError
from mtp_viz.sources import trace
from mtp_viz.sources.recorded import TraceSource
from mtp_viz.views import captions, charts, export, stats, tokens
from mtp_viz.views.frame import PANE, Frame, cleared

from . import form
from .frames import message, outputs

REPLAY_SECONDS = 300.0  # the longest a Race replay plays before it shows the whole run
MAX_PARSES = 2          # traces parsed at once, all sessions together: parsing holds a CPU
PARSE_WAIT = 30.0       # seconds a trace waits for a parse slot (a 5 MB parse takes about one)
PARSES = threading.BoundedSemaphore(MAX_PARSES)
# The largest trace upload, in bytes: the reader's own bound. The page passes it to Gradio's
# launch as ``max_file_size`` (``Traces.MAX_UPLOAD_BYTES``), whose upload route refuses a
# larger file as it arrives; read_trace refuses one by its size too.
MAX_UPLOAD_BYTES = trace.MAX_BYTES
WAITING = "Waiting to read the trace: other visitors' traces are being read."
BUSY = "The app is busy reading other visitors' traces; try again in a moment."


def read_trace(path: str) -> Generator[str, None, TraceSource]:
    """Read the trace at ``path`` as a :class:`TraceSource`, within the app's bounds:
    a file over :data:`MAX_UPLOAD_BYTES` is refused by its size, before a parse slot
    and without reading it; then a parse slot of :data:`PARSES`, waited for at most
    :data:`PARSE_WAIT` seconds. A generator: it yields :data:`WAITING` while the slots
    are taken, and returns the source (``yield from``); every refusal is a UserError."""
    try:
        size = os.stat(path).st_size
    except OSError:
        raise UserError("The trace file cannot be read.") from None
    if size > MAX_UPLOAD_BYTES:
        raise UserError(trace.too_large())
    if not PARSES.acquire(blocking=False):
        yield WAITING
        if not PARSES.acquire(timeout=PARSE_WAIT):
            raise UserError(BUSY)
    try:
        return TraceSource.read(path)
    finally:
        PARSES.release()


class Traces:
    """The recorded runs' handlers: race replay, a trace's upload or example, the scrubber and
    the downloads; composed into :class:`mtp_viz.app.handlers.local.Handlers` as ``traces``,
    with the page's empty charts and its downloads folder."""

    MAX_UPLOAD_BYTES = MAX_UPLOAD_BYTES  # for the page: launch(max_file_size=Traces.MAX_UPLOAD_BYTES)

    def __init__(self, empty_figures: dict, downloads: Any):
        self.empty_figures, self.downloads = empty_figures, downloads

    @staticmethod
    def replay(sess: runs.Session | None, speed: Any):
        """Both recorded runs, side by side, on their recorded timestamps; then the
        charts, the speedup and the theory panel of the whole run."""
        if sess is None or not (sess.spec or sess.ar):
            yield outputs(message("Run a prompt first.", level="warn"))
            return
        try:
            speed = form.number(1.0 if speed in (None, "") else speed, "The replay speed")
            if not 0 < speed <= 100:
                raise UserError("The replay speed must be above 0 and at most 100.")
        except UserError as e:
            yield outputs(message(str(e), level="error"))
            return
        t0, shown, clock, cut = time.monotonic(), None, 0.0, False
        while True:
            now = time.monotonic()
            t = (now - t0) * speed
            if now - t0 > REPLAY_SECONDS:  # a replay holds one of a few slots: never for long
                cut = True
                break
            (s, s_done), (a, a_done) = stream.events_until(sess.spec, t), stream.events_until(sess.ar, t)
            status = message(f"Race replay at {speed:g}× speed · t = {t:.2f} s")
            if (len(s), len(a)) != shown:  # tokens only when some arrived; the clock 4× a second
                shown, clock = (len(s), len(a)), now
                yield outputs(status | Frame(spec=tokens.tokens_html(s), ar=tokens.tokens_html(a),
                                             spec_stats=stats.stats_html(stats.run_stats(s, now=t)),
                                             ar_stats=stats.stats_html(stats.run_stats(a, now=t))))
            elif now - clock >= 0.25:
                clock = now
                yield outputs(status)
            if s_done and a_done:
                break
            time.sleep(0.04)
        whole = Frame(spec=tokens.tokens_html(sess.spec), ar=tokens.tokens_html(sess.ar),
                      spec_stats=stats.stats_html(stats.run_stats(sess.spec)),
                      ar_stats=stats.stats_html(stats.run_stats(sess.ar))) if cut else Frame()
        yield outputs(whole | runs.final_frame(sess) | message(
            (f"The replay stopped after {REPLAY_SECONDS / 60:g} minutes and shows the whole run. " if cut else "")
            + f"Replay done: speculative finished in {stats.run_stats(sess.spec).seconds:.2f} s, "
            f"autoregressive in {stats.run_stats(sess.ar).seconds:.2f} s."))

    # ------------------------------------------------------------ the scrubber

    @staticmethod
    def scrub_range(sess: runs.Session | None):
        """``#scrub`` over the steps of the run just shown (speculative, else the
        baseline), at its last step."""
        steps = [e.step for e in (sess.spec or sess.ar) if e.type == "step"] if sess else []
        if not steps:
            return gr.update(minimum=0, maximum=1, value=0, interactive=False)
        return gr.update(minimum=1, maximum=max(steps), value=max(steps), interactive=True)

    @staticmethod
    def scrub(sess: runs.Session | None, step: Any):
        """The panes, stats and charts after step ``step`` of the run; the baseline as
        it stood at that moment of the speculative run's recorded clock."""
        if sess is None or not (sess.spec or sess.ar):
            return outputs(message("Run a prompt or replay a trace first.", level="warn"))
        s = form.whole(step, "The step")
        main, other = (sess.spec, sess.ar) if sess.spec else (sess.ar, [])
        shown = stream.events_through_step(main, s)
        t = max((e.t for e in shown if e.type == "step"), default=0.0)
        beside = stream.events_until(other, t)[0]
        spec, ar = (shown, beside) if sess.spec else ([], shown)
        return outputs(Frame(spec=tokens.tokens_html(spec), ar=tokens.tokens_html(ar),
                             spec_stats=stats.stats_html(stats.run_stats(spec, now=t)),
                             ar_stats=stats.stats_html(stats.run_stats(ar, now=t)),
                             figures=charts.all_figures(spec, ar), caption=captions.caption_html(shown))
                       | message(f"After step {s} (t = {t:.3f} s of the recorded run)."))

    # ------------------------------------------------------------ traces

    @staticmethod
    def example_traces() -> list[tuple[str, str]]:
        """The shipped example traces as picker choices: (title, file stem); the page
        never sees a server path."""
        paths = sorted(trace.examples_dir().glob("*.jsonl"))
        return [(json.loads(p.open(encoding="utf-8").readline()).get("title") or p.stem, p.stem) for p in paths]

    def replay_example(self, name: str | None, sess: runs.Session | None, speed: Any):
        if not name:
            return
        if name not in {stem for _, stem in self.example_traces()}:
            yield outputs(message("Pick an example trace from the list.", level="error"))
            return
        yield from self.replay_trace(str(trace.examples_dir() / f"{name}.jsonl"), sess, speed)

    def replay_trace(self, path: str | None, sess: runs.Session | None, speed: Any):
        """A trace file (an upload or an example) into the session, replayed like a
        run of this app: no model is needed."""
        if not path:
            return
        sess = sess or runs.Session()
        reading = read_trace(path)
        try:
            while True:
                yield outputs(message(next(reading)))  # waiting for a parse slot
        except StopIteration as done:
            source = done.value
        except UserError as e:
            yield outputs(message(str(e), level="error"))
            return
        sess.new_run()
        recorded = {pane: [] for pane in PANE.values()}
        for mode, e in source.runs():
            recorded[PANE[mode]].append(e)
        sess.spec, sess.ar = spec, ar = recorded["spec"], recorded["ar"]
        first = (spec or ar)[0]
        sess.greedy = not first.settings.get("temperature")  # CLI traces of AR runs carry none: greedy
        yield outputs(cleared("Replaying the trace…" if spec else "The trace has no speculative run.",
                              "Replaying the trace…" if ar else "The trace has no baseline.", self.empty_figures),
                      sess, gr.update(interactive=bool(spec and ar)))
        yield from self.replay(sess, speed)

    def download_files(self, sess: runs.Session | None):
        """The session's last run for the download buttons: the trace (``#trace-download``;
        the speculative events, then the baseline's), the page (``#export-html``) and
        the per-step metrics (``#export-csv``)."""
        if sess is None or not (sess.spec or sess.ar):
            return (gr.update(value=None, interactive=False),) * 3
        events = [*sess.spec, *sess.ar]
        page = export.page_html(sess.spec, sess.ar, greedy=sess.greedy, css=export.stylesheet(),
                                title="mtp-viz run")
        paths = (trace.write(self.downloads.path("mtp-viz-trace.jsonl"), events),
                 self._text(self.downloads.path("mtp-viz-run.html"), page),
                 self._text(self.downloads.path("mtp-viz-steps.csv"), export.steps_csv(sess.spec, sess.ar)))
        return tuple(gr.update(value=str(p), interactive=True) for p in paths)

    @staticmethod
    def _text(path, text: str):
        path.write_text(text, encoding="utf-8")
        return path


__all__ = ["MAX_PARSES", "MAX_UPLOAD_BYTES", "PARSE_WAIT", "Traces", "read_trace"]
