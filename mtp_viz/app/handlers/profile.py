"""The Measure tab's Profile (``#profile-run``): what each forward of the picked pair costs
on this machine and the speedup those costs predict, checked by whole runs at a set
acceptance, as ``mtp-viz profile`` measures it (:func:`mtp_viz.measure.profile.study`,
drawn by :mod:`mtp_viz.views.profile`). No torch here.

It passes the same gate as Run and Measure (the pair the form names, waiting for it to
load, then for the engine's turn, so a profile never shares the CPU with a run), times
the pair on the engine it is loaded on, and holds that turn for a bounded time: its
repeats are fixed, its runs are the form's length (the deployment's cap applies), and Stop
ends it between two timed parts. Outputs: ``(#profile-status, #profile-result,
#profile-plot)`` and the session (for Stop).
"""
from __future__ import annotations

import time
from typing import Any, Callable

import gradio as gr

from mtp_viz.app.runtime import runs, work
from mtp_viz.errors import UserError, clip
from mtp_viz.measure import profile
from mtp_viz.sources.settings import RunSettings
from mtp_viz.views import profile as view, tokens
from mtp_viz.views.frame import Frame

from .gate import CUSTOM, Gate

REPEATS = 3          # timed repeats of every forward and every whole run
PROMPT_TOKENS = 32   # the profile's prompt, in tokens (its text does not change a forward's cost)
EAGER_WIDTHS = 8     # drafts up to this many + 1 on the eager engine (the compiled one: the form's γ)


class Profiling:
    """Profile's handler: composed of the page's :class:`.gate.Gate` and its form check."""

    def __init__(self, gate: Gate, settings: Callable[[dict[str, Any]], RunSettings]):
        self.gate, self.settings = gate, settings

    @staticmethod
    def empty() -> tuple:
        """The section before any profile: its prompt and an empty chart."""
        return tokens.placeholder_html(view.WAITING), view.figure(None)

    def profile(self, values: dict[str, Any], sess: runs.Session | None):
        """Yields ``(status, result, figure, session)``: the waits for the pair and the engine, then
        the profile; a bad field, a failed load or Stop is one sentence in the status."""
        sess = sess or runs.Session()
        sess.stop.clear()
        try:
            s = self.settings(values).only("speculative")
            spec = self.gate.asked_by(values)
            for item in self.gate.enter(spec, sess, s):   # a compiled pair's graphs for the form's γ too
                if isinstance(item, Frame):
                    if item.status:
                        yield item.status, gr.skip(), gr.skip(), sess
                else:
                    pair, ticket = item
        except UserError as e:
            yield tokens.message_html(str(e), level="error"), gr.skip(), gr.skip(), sess
            return
        name = clip(spec.target) if values["model"] == CUSTOM else values["model"]
        draft_tokens = s.draft_tokens or 4
        failed = ""
        try:
            yield tokens.message_html(
                f"Profiling on the {pair.engine} engine: every forward's cost, {REPEATS} repeats, then whole runs of "
                f"{s.max_new_tokens} tokens at a set acceptance; nothing rendered meanwhile…"), \
                    gr.skip(), gr.skip(), sess
            t = time.monotonic()
            with work.working(sess.stop):   # the app's close stops it first
                result = profile.study({pair.engine: pair}, prompt_tokens=PROMPT_TOKENS, new_tokens=s.max_new_tokens,
                                       draft_tokens=draft_tokens,
                                       max_draft_tokens=(draft_tokens if pair.compile_seconds
                                                         else max(EAGER_WIDTHS, draft_tokens)),
                                       alphas=profile.ALPHAS if pair.has_mtp else (), repeats=REPEATS,
                                       stop=sess.stop)
            took = time.monotonic() - t
        except UserError as e:
            failed = str(e)
        finally:
            ticket.leave()   # before anything is yielded: the next visitor's turn never waits on this page
        if failed:
            yield tokens.message_html(failed, level="error"), gr.skip(), gr.skip(), sess
            return
        profile.describe(result, pair, name)
        said = "" if pair.has_mtp else " This pair has no MTP assistant: only the target's costs."
        yield (tokens.message_html(f"Profiled in {took:.0f} s, on this machine: {result['meta']['machine_line']}."
                                   + said), view.html(result), view.figure(result), sess)


__all__ = ["EAGER_WIDTHS", "PROMPT_TOKENS", "Profiling", "REPEATS"]
