"""Handlers of recorded runs: Race replay, the scrubber, traces (upload, examples,
download) and the exports. The session's recorded events are all they need: no model.

Handlers return *frames*: dicts from display slot to value (see :data:`SLOTS`); the
UI turns a frame into its outputs list, leaving absent slots unchanged.
"""
from __future__ import annotations

import json
import time
from typing import Any

import gradio as gr

from mtp_viz.sources import trace
from mtp_viz.errors import UserError
from mtp_viz.analysis import stream
from mtp_viz.app.views import captions, charts, export, stats, tokens
from mtp_viz.app.runtime import runs, service
from . import form

PLOTS = tuple(c.id for c in charts.CHARTS)
SLOTS = ("status", "caption", "spec", "spec_stats", "ar", "ar_stats", "compare", "theory") + PLOTS


def frame(f: dict[str, Any], sess: Any = None, replay: Any = None) -> list[Any]:
    """A frame (slot -> value) as the run outputs list; absent slots are skipped."""
    figures = f.get("figures", {})
    vals = [figures[s] if s in figures else f.get(s, gr.skip()) for s in SLOTS]
    return vals + [gr.skip() if sess is None else sess, gr.skip() if replay is None else replay]


class Recorded:
    """Mixed into :class:`mtp_viz.app.handlers.local.Handlers`; uses its ``downloads`` and
    ``empty_figures``."""

    @staticmethod
    def replay(sess: runs.Session | None, speed: Any):
        """Both recorded runs, side by side, on their recorded timestamps; then the
        charts, the speedup and the theory panel of the whole run."""
        if sess is None or not (sess.spec or sess.ar):
            yield frame({"status": tokens.message_html("Run a prompt first.", level="warn")})
            return
        speed, t0, shown, clock = float(speed or 1.0), time.monotonic(), None, 0.0
        while True:
            now = time.monotonic()
            t = (now - t0) * speed
            (s, s_done), (a, a_done) = stream.events_until(sess.spec, t), stream.events_until(sess.ar, t)
            status = {"status": tokens.message_html(f"Race replay at {speed:g}× speed · t = {t:.2f} s")}
            if (len(s), len(a)) != shown:  # tokens only when some arrived; the clock 4× a second
                shown, clock = (len(s), len(a)), now
                yield frame({"spec": tokens.tokens_html(s), "ar": tokens.tokens_html(a),
                             "spec_stats": stats.stats_html(stats.run_stats(s, now=t)),
                             "ar_stats": stats.stats_html(stats.run_stats(a, now=t)), **status})
            elif now - clock >= 0.25:
                clock = now
                yield frame(status)
            if s_done and a_done:
                break
            time.sleep(0.04)
        yield frame({**runs.final_frame(sess), "status": tokens.message_html(
            f"Replay done: speculative finished in {stats.run_stats(sess.spec).seconds:.2f} s, "
            f"autoregressive in {stats.run_stats(sess.ar).seconds:.2f} s.")})

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
            return frame({"status": tokens.message_html("Run a prompt or replay a trace first.", level="warn")})
        s = form.whole(step, "The step")
        main, other = (sess.spec, sess.ar) if sess.spec else (sess.ar, [])
        shown = stream.events_through_step(main, s)
        t = max((e.t for e in shown if e.type == "step"), default=0.0)
        beside = stream.events_until(other, t)[0]
        spec, ar = (shown, beside) if sess.spec else ([], shown)
        return frame({"spec": tokens.tokens_html(spec), "ar": tokens.tokens_html(ar),
                      "spec_stats": stats.stats_html(stats.run_stats(spec, now=t)),
                      "ar_stats": stats.stats_html(stats.run_stats(ar, now=t)),
                      "figures": charts.all_figures(spec, ar), "caption": captions.caption_html(shown),
                      "status": tokens.message_html(f"After step {s} (t = {t:.3f} s of the recorded run).")})

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
            yield frame({"status": tokens.message_html("Pick an example trace from the list.", level="error")})
            return
        yield from self.replay_trace(str(trace.examples_dir() / f"{name}.jsonl"), sess, speed)

    def replay_trace(self, path: str | None, sess: runs.Session | None, speed: Any):
        """A trace file (an upload or an example) into the session, replayed like a
        run of this app: no model is needed."""
        if not path:
            return
        sess = sess or runs.Session()
        try:
            spec, ar = trace.spec_and_ar(trace.read(path))
        except UserError as e:
            yield frame({"status": tokens.message_html(str(e), level="error")})
            return
        sess.new_run()
        sess.spec, sess.ar = spec, ar
        first = (spec or ar)[0]
        sess.greedy = not first.settings.get("temperature")  # CLI traces of AR runs carry none: greedy
        yield frame({"spec": tokens.placeholder_html("Replaying the trace…" if spec else "The trace has no "
                                                   "speculative run."),
                     "ar": tokens.placeholder_html("Replaying the trace…" if ar else "The trace has no baseline."),
                     "compare": stats.compare_html(stats.RunStats(), stats.RunStats(), greedy=True),
                     "theory": "", "figures": self.empty_figures}, sess, gr.update(interactive=bool(spec and ar)))
        yield from self.replay(sess, speed)

    def download_files(self, sess: runs.Session | None):
        """The session's last run for the download buttons: the trace (``#trace-download``;
        the speculative events, then the baseline's), the page (``#export-html``) and
        the per-step metrics (``#export-csv``)."""
        if sess is None or not (sess.spec or sess.ar):
            return (gr.update(value=None, interactive=False),) * 3
        events = [*sess.spec, *sess.ar]
        page = export.page_html(sess.spec, sess.ar, greedy=sess.greedy, css=service.css(),
                                title="mtp-viz run")
        paths = (trace.write(self.downloads.path("mtp-viz-trace.jsonl"), events),
                 self._text(self.downloads.path("mtp-viz-run.html"), page),
                 self._text(self.downloads.path("mtp-viz-steps.csv"), export.steps_csv(sess.spec, sess.ar)))
        return tuple(gr.update(value=str(p), interactive=True) for p in paths)

    @staticmethod
    def _text(path, text: str):
        path.write_text(text, encoding="utf-8")
        return path


__all__ = ["PLOTS", "SLOTS", "Recorded", "frame"]
