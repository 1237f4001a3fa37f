"""The page's tabs: a bar of buttons (``#tabs``) over one column per tab (``#tab-<id>``).

Not ``gr.Tabs``: Gradio 6 mounts a tab's children only once the tab is first opened
(``render_children`` has no effect in its front end), and the page's ids are a contract
that tests, links and scripts rely on whether or not a tab was opened. So every panel is
an ordinary column, always in the page, and the one not shown is ``display: none``;
which one shows is ``body[data-tab]``, set by :data:`JS` from a click, an arrow key or
the address (``?tab=measure``; a bad value is named by :mod:`mtp_viz.app.handlers.links`).
"""
from __future__ import annotations

import html
import json
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Iterator

import gradio as gr


@dataclass(frozen=True)
class Tab:
    id: str       # ?tab=<id>, #tab-<id> (the panel), data-tab=<id> (its button)
    label: str


DECODE = Tab("decode", "Decode")
INSIDE = Tab("inside", "Inside a step")
MEASURE = Tab("measure", "Measure")
SERVERS = Tab("servers", "Servers")
LEARN = Tab("learn", "Learn")


def bar(tabs: list[Tab]) -> gr.HTML:
    """``#tabs``: one button per tab, the first selected (until :data:`JS` runs, the CSS
    of :func:`style` shows the first panel too)."""
    buttons = "".join(
        f'<button type="button" role="tab" id="tab-{t.id}-button" data-tab="{t.id}" aria-controls="tab-{t.id}" '
        f'aria-selected="{"true" if i == 0 else "false"}" tabindex="{0 if i == 0 else -1}">{html.escape(t.label)}'
        '</button>' for i, t in enumerate(tabs))
    return gr.HTML(f'<div class="mv-tabbar" role="tablist" aria-label="Sections">{buttons}</div>',
                   elem_id="tabs", padding=False, head=style(tabs))


@contextmanager
def panel(tab: Tab) -> Iterator[gr.Column]:
    with gr.Column(elem_id=f"tab-{tab.id}", elem_classes=["mv-tabpanel"]) as col:
        yield col


def style(tabs: list[Tab]) -> str:
    """Every panel hidden but the selected one (the first while ``body[data-tab]`` is unset)."""
    first = tabs[0].id
    shown = ", ".join([f"body:not([data-tab]) #tab-{first}"] + [f'body[data-tab="{t.id}"] #tab-{t.id}' for t in tabs])
    return f"""<style>
.mv-tabpanel {{ display: none !important; }}
{shown} {{ display: flex !important; }}
.mv-tabbar {{ display: flex; gap: 2px; border-bottom: 1px solid var(--border-color-primary, #e5e7eb); }}
.mv-tabbar button {{ border: 1px solid transparent; border-bottom: none; background: none; padding: 5px 14px;
  font-size: 14px; color: var(--body-text-color-subdued, #4b5563); cursor: pointer; border-radius: 8px 8px 0 0; }}
.mv-tabbar button[aria-selected="true"] {{ color: var(--body-text-color, #111827); font-weight: 600;
  border-color: var(--border-color-primary, #e5e7eb); background: var(--block-background-fill, #fff);
  margin-bottom: -1px; box-shadow: inset 0 2px 0 #059669; }}
</style>"""


def script(tabs: list[Tab]) -> str:
    """Runs once on load: ``window.__mvShowTab(id)`` (also used by the tour and by in-page
    links to reach a hidden panel), clicks and arrow keys on ``#tabs``, and ``?tab=``."""
    return """() => {
  const IDS = %s;
  const show = (id) => {
    if (!IDS.includes(id)) return false;
    document.body.dataset.tab = id;
    document.querySelectorAll('#tabs [data-tab]').forEach(b => {
      const on = b.dataset.tab === id;
      b.setAttribute('aria-selected', on ? 'true' : 'false'); b.tabIndex = on ? 0 : -1;
    });
    // charts drawn while their panel was hidden take its width now
    requestAnimationFrame(() => window.dispatchEvent(new Event('resize')));
    return true;
  };
  window.__mvShowTab = show;
  IDS.forEach(id => { const p = document.getElementById('tab-' + id);
    if (p) { p.setAttribute('role', 'tabpanel'); p.setAttribute('aria-labelledby', 'tab-' + id + '-button'); } });
  document.addEventListener('click', ev => {
    const b = ev.target.closest('#tabs [data-tab]'); if (b) show(b.dataset.tab); });
  document.addEventListener('keydown', ev => {
    const b = ev.target.closest('#tabs [data-tab]');
    if (!b || (ev.key !== 'ArrowRight' && ev.key !== 'ArrowLeft')) return;
    const i = (IDS.indexOf(b.dataset.tab) + (ev.key === 'ArrowRight' ? 1 : IDS.length - 1)) %% IDS.length;
    show(IDS[i]); document.getElementById('tab-' + IDS[i] + '-button').focus();
  });
  show(new URLSearchParams(location.search).get('tab') || IDS[0]) || show(IDS[0]);
}""" % json.dumps([t.id for t in tabs])


def wire(demo: gr.Blocks, tabs: list[Tab]) -> None:
    demo.load(None, None, None, js=script(tabs), api_visibility="private", queue=False)


__all__ = ["DECODE", "INSIDE", "LEARN", "MEASURE", "SERVERS", "Tab", "bar", "panel", "wire"]
