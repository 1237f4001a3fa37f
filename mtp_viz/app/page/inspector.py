"""The token inspector and the anatomy panel on the page: components and wiring.

Clicking a token in ``#spec-output`` or ``#ar-output`` sends its ``data-kind``,
``data-step`` and ``data-index`` to the server, which renders ``#inspector`` from the
session's recorded run (:mod:`mtp_viz.views.inspector`); ``#anatomy``
(:mod:`mtp_viz.views.anatomy`) draws the loaded pair's drafter once the pair is
ready, and again after each run with what its rejections say. No torch here:
:mod:`mtp_viz.analysis.anatomy` only reads module shapes.
"""
from __future__ import annotations

from typing import Any

import gradio as gr

import mtp_viz.analysis.anatomy  # the module, not its anatomy(): that name is the view's
from mtp_viz.app.runtime.service import Load
from mtp_viz.errors import UserError
from mtp_viz.views import anatomy, inspector

# One document-level listener (however often the component mounts) that hands the
# clicked token to the newest mount's trigger; × and Escape close the panel.
JS = """
window.__mvInspect = (data) => trigger('click', data);
window.__mvClose = () => { props.value = ''; };
if (!window.__mvInspectListening) {
  window.__mvInspectListening = true;
  document.addEventListener('click', (ev) => {
    const tok = ev.target.closest('#spec-output .tok[data-step], #ar-output .tok[data-step]');
    if (tok) {
      document.querySelectorAll('.tok.mv-picked').forEach((e) => e.classList.remove('mv-picked'));
      tok.classList.add('mv-picked');
      window.__mvInspect({pane: tok.closest('#spec-output') ? 'spec' : 'ar', kind: tok.dataset.kind,
                          step: Number(tok.dataset.step), index: Number(tok.dataset.index || 0)});
    } else if (ev.target.closest('#inspector .mv-close')) {
      window.__mvClose();
    }
  });
  document.addEventListener('keydown', (ev) => { if (ev.key === 'Escape') window.__mvClose(); });
}
"""

STYLE = """<style>
#spec-output .tok[data-step], #ar-output .tok[data-step] { cursor: pointer; }
.tok.mv-picked { outline: 2px solid #7c3aed !important; outline-offset: 1px; }
#inspector .mv-inspector { position: fixed; right: 14px; bottom: 14px; z-index: 1000; width: min(600px, 94vw);
  max-height: 72vh; overflow: auto; background: var(--background-fill-primary, #fff); color: #111827;
  border: 1px solid #9ca3af; border-radius: 10px; box-shadow: 0 8px 28px rgba(0,0,0,.25); padding: 10px 14px;
  font-size: 13.5px; line-height: 1.45; }
#inspector .mv-insp-head { font-weight: 600; margin-bottom: 4px; }
#inspector .mv-insp-head code, #inspector .mv-insp-note code, #inspector .mv-insp-verdict code {
  background: #f3f4f6; padding: 0 3px; border-radius: 3px; }
#inspector .mv-close { float: right; border: none; background: none; font-size: 20px; cursor: pointer;
  line-height: 1; color: #374151; }
#inspector .mv-insp-accept { font-size: 15px; margin: 2px 0; }
#inspector .mv-insp-verdict[data-verdict="rejected"] b { color: #b91c1c; }
#inspector .mv-insp-verdict[data-verdict="accepted"] b { color: #047857; }
#inspector .mv-insp-cols { display: flex; gap: 14px; flex-wrap: wrap; margin-top: 6px; }
#inspector table, #inspector tr { border: none !important; }
#inspector table { border-collapse: collapse; font-variant-numeric: tabular-nums; }
#inspector caption { text-align: left; font-weight: 600; color: #374151; padding-bottom: 2px; }
#inspector td { padding: 1px 6px 1px 0 !important; border: none !important; white-space: pre; }
#inspector td.mv-cand { font-family: ui-monospace, "DejaVu Sans Mono", monospace; max-width: 9em;
  overflow: hidden; text-overflow: ellipsis; }
#inspector tr.mv-here td { background: #ede9fe; font-weight: 600; }
#inspector .mv-bar { display: inline-block; height: .75em; background: #60a5fa; vertical-align: middle; }
#inspector .mv-insp-note { color: #4b5563; margin: 6px 0 0 0; }
#anatomy .mv-anatomy svg { width: 100%; max-width: 1000px; height: auto; font-size: 12.5px; }
#anatomy .mv-an-box rect { fill: #f9fafb; stroke: #6b7280; stroke-width: 1.2; }
#anatomy .mv-an-target rect, #anatomy .mv-an-kv rect { fill: #eff6ff; stroke: #2563eb; }
#anatomy .mv-an-proj rect { fill: #fefce8; stroke: #a16207; }
#anatomy .mv-an-head rect { fill: #f0fdf4; stroke: #15803d; }
#anatomy svg text { text-anchor: middle; fill: #111827; }
#anatomy svg .mv-an-title { font-weight: 700; }
#anatomy svg .mv-an-edge { font-size: 11.5px; fill: #4b5563; }
#anatomy svg line, #anatomy svg path { stroke: #374151; stroke-width: 1.4; }
#anatomy svg marker path { fill: #374151; stroke: none; }
#anatomy .mv-an-list { columns: 3; font-size: 12.5px; margin: 0; }
</style>"""


def floating() -> gr.HTML:
    """``#inspector``: a floating panel, empty until a token is clicked."""
    return gr.HTML("", elem_id="inspector", js_on_load=JS, head=STYLE, padding=False)


def anatomy_panel() -> gr.HTML:
    """``#anatomy`` under its title, drawn once a pair is loaded."""
    gr.Markdown("### Anatomy of the MTP drafter", elem_id="anatomy-title")
    return gr.HTML(anatomy.anatomy_html(None), elem_id="anatomy", padding=False)


def inspect(sess: Any, evt: gr.EventData) -> str:
    """``#inspector`` for the clicked token of the session's last run or replay."""
    data = getattr(evt, "_data", None) or {}
    events = (sess.spec if data.get("pane") == "spec" else sess.ar) if sess is not None else []
    try:
        step, index = int(data.get("step")), int(data.get("index") or 0)
    except (TypeError, ValueError):
        return inspector.inspector_html(None)
    return inspector.inspector_html(inspector.find(events, str(data.get("kind")), step, index))


def anatomy_for(h, key: str, custom_target: str, custom_drafter: str, sess: Any = None,
                target_precision: Any = None, drafter_precision: Any = None, engine: Any = None) -> Any:
    """``#anatomy`` for the pair picked in the form (in the precisions and on the engine
    asked), once it is loaded (else unchanged)."""
    try:
        spec = h.gate.asked(key, custom_target, custom_drafter, target_precision, drafter_precision, engine)
    except UserError:
        return gr.skip()
    st = h.loader.state(spec)
    if st.status != Load.READY:
        return gr.skip()
    events = sess.spec if sess is not None else ()
    return anatomy.anatomy_html(mtp_viz.analysis.anatomy.anatomy(st.pair), events)


def attach(h, session: gr.State, panel: gr.HTML, drawing: gr.HTML, load_inputs: list, loads: list,
           runs: list) -> None:
    """Clicks on tokens fill the inspector; the anatomy is redrawn after each of
    ``loads`` (the events that report a pair's loading) once the pair is ready, and
    after each of ``runs`` with what the run's rejections say."""
    hidden = dict(api_visibility="private")
    panel.click(inspect, session, panel, queue=False, **hidden)

    def redraw(key, custom_target, custom_drafter, target_precision, drafter_precision, engine, sess=None):
        return anatomy_for(h, key, custom_target, custom_drafter, sess, target_precision, drafter_precision,
                           engine)

    for ev in loads:
        ev.then(redraw, load_inputs, drawing, queue=False, show_progress="hidden", **hidden)
    for ev in runs:
        ev.then(redraw, [*load_inputs, session], drawing, queue=False, show_progress="hidden", **hidden)


__all__ = ["floating", "anatomy_panel", "attach", "inspect", "anatomy_for"]
