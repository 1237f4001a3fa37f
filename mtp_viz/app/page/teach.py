"""The page's teaching features, wired into gradio: the what-if estimate, the "when does
MTP help?" panel, the glossary, the first-visit tour, presenter mode, deep links and the
Copy link button. Layout in :func:`measure_sections` and :func:`learn_section`; the rest
is events, in :func:`wire`.
Rendering lives in :mod:`mtp_viz.views.explain`, link parsing in
:mod:`mtp_viz.app.handlers.links`.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import gradio as gr

from mtp_viz.app.handlers import links
from mtp_viz.prompts import category_suite
from mtp_viz.views import explain, tokens

TOUR_KEY = "mtp-viz-tour-done"   # localStorage: set once the tour is finished or closed
PRESENTER_CLASS = "mv-presenter"  # on <body> with ?presenter=1
RESULTS = Path(__file__).resolve().parents[3] / "benchmarks" / "results"  # in a repository checkout
MOE_NOTE = ("Google's guide to MTP in Gemma 4 warns that in a mixture-of-experts model such as 26B-A4B each "
            "drafted token may route to different experts, so verifying a draft can load extra expert "
            "weights from memory; at batch size 1 those experts overlap little, and the 26B-A4B drafter may "
            "give no speedup on hardware without good parallelism. Dense models (E2B, E4B, 31B) verify "
            "several tokens for about the price of one.")


def what_if_update(sess: Any) -> str:
    """``#what-if`` for the session's last run (a live run, a replay or a trace)."""
    from mtp_viz.analysis.metrics import theory_check
    from mtp_viz.analysis.whatif import what_if
    if sess is None or not sess.spec:
        return explain.what_if_html(None)
    check = theory_check(sess.spec, sess.ar or None)
    if check is not None and not check.timed:  # no c to estimate speedups with
        return explain.what_if_html(None, "Not for this run: its source (a vLLM server) reports no "
                                             "drafting or verification times to estimate speedups from.")
    return explain.what_if_html(what_if(check))


def measured_results(root: Path = RESULTS) -> list[tuple[str, str, dict]]:
    """The benchmark results that break speedup down by category: (path shown, the
    file's note, bench.json). Empty where the repository's results are not installed."""
    out = []
    for path in sorted(root.glob("*/bench.json")):
        bench = json.loads(path.read_text(encoding="utf-8"))
        if not bench.get("categories") or explain.bench_setting(bench) is None:
            continue
        md = path.with_suffix(".md")
        lines = md.read_text(encoding="utf-8").splitlines() if md.exists() else []
        title = next((ln.split(":", 1)[-1].strip() for ln in lines if ln.startswith("## ")), "")
        note = next((ln[2:].strip() for ln in lines if ln.startswith("> ")), "")
        out.append((f"benchmarks/results/{path.parent.name}/bench.json", " — ".join(filter(None, [title, note])),
                    bench))
    return out


def when_helps() -> str:
    suite = json.loads(category_suite().read_text(encoding="utf-8"))
    titles: dict[str, list[str]] = {}
    for p in suite["prompts"]:
        titles.setdefault(p["category"], []).append(p["title"])
    return explain.when_helps_html(suite["categories"], titles, measured_results(), MOE_NOTE)


def measure_sections() -> gr.HTML:
    """The Measure tab's teaching: the what-if (returned: runs update it) and the "when
    does MTP help?" panel (prompt categories, measured results, the MoE caveat)."""
    what_if = gr.HTML(explain.what_if_html(None), elem_id="what-if", padding=False)
    summary = "When does MTP help? Prompt categories, measured results, the mixture-of-experts caveat"
    gr.HTML(f'<details class="mv-when-box"><summary>{summary}</summary>{when_helps()}</details>',
            elem_id="when-mtp-helps", padding=False)
    return what_if


def learn_section(tab_ids: list[str]) -> None:
    """The Learn tab: the tour, the tabs a link opens, what each panel shows, the glossary."""
    gr.HTML(explain.learn_html(tab_ids), elem_id="learn", padding=False)
    gr.HTML(explain.glossary_html(), elem_id="glossary", padding=False)


def wire(demo: gr.Blocks, form: dict, status: gr.HTML, limits: links.Limits) -> Any:
    """The page script (presenter mode, tour), the deep link, and Copy link. Returns the
    deep-link load event, for what should follow it.

    ``#share-link`` is a button in the header (:func:`explain.header_links`); it
    presses the hidden ``#share-build``, whose handler turns the form into a query that
    travels through the hidden ``#share-query`` to :data:`SHARE_JS`, which shows the
    whole link in ``#status``."""
    button = gr.Button("Copy link", elem_id="share-build", visible="hidden")
    box = gr.Textbox("", elem_id="share-query", visible="hidden")
    names = list(form.values())
    comps = list(form.keys())
    hidden = dict(api_visibility="private", queue=False)

    def restore(request: gr.Request):
        params = dict(request.query_params) if request is not None else {}
        link = links.parse(params, limits)
        values = [link.values[n] if n in link.values else gr.skip() for n in names]
        return values + [tokens.message_html(link.sentence(), level="warn") if link.problems else gr.skip()]

    def share_query(*vals):
        return links.query(dict(zip(names, vals)), limits)

    demo.load(None, None, None, js=page_script(), **hidden)
    button.click(share_query, comps, box, **hidden).then(None, box, status, js=SHARE_JS, **hidden)
    return demo.load(restore, None, comps + [status], **hidden)


# The query the server built, plus the open tab unless it is the first, made absolute
# against this page's address, copied to the clipboard where the browser allows, and shown
# in #status as <code id="share-url">.
SHARE_JS = """(q) => {
  q = q || '?';
  const tab = document.body.dataset.tab, first = document.querySelector('#tabs [data-tab]');
  if (tab && first && tab !== first.dataset.tab) q += (q.length > 1 ? '&' : '') + 'tab=' + encodeURIComponent(tab);
  const url = location.origin + location.pathname + (q.length > 1 ? q : '');
  try { navigator.clipboard.writeText(url).catch(() => {}); } catch (e) {}
  const esc = s => s.replace(/[&<>"']/g, c => '&#' + c.charCodeAt(0) + ';');
  return '<div class="mv-msg mv-msg-info mv-share">Link to these settings (copied):'
    + '<code id="share-url">' + esc(url) + '</code></div>';
}"""


def page_script() -> str:
    """Runs once in the browser on load: presenter mode from the address, and the tour
    (shown until finished or closed once; the header's Tour link starts it again).
    ``body[data-tour]`` says "shown" or "dismissed" once the script has decided.

    The card sits in the page (``position: absolute``), so it scrolls with what it
    points at, and beside its target where it covers neither the target nor Run's row
    (``#buttons``): below, right, above or left, the first that fits the window; the
    page's layout changing (a run filling the panes) places it again. A target in a
    hidden tab opens that tab first (``window.__mvShowTab``, from :mod:`.tabs`)."""
    return """() => {
  const KEY = %s, STEPS = %s;
  if (new URLSearchParams(location.search).get('presenter') === '1') document.body.classList.add(%s);
  let card = null, at = 0;
  const openTab = el => { const p = el && el.closest('.mv-tabpanel');
    if (p && window.__mvShowTab) window.__mvShowTab(p.id.replace(/^tab-/, '')); };
  const clear = () => document.querySelectorAll('.mv-tour-target').forEach(e => e.classList.remove('mv-tour-target'));
  const end = () => { clear(); if (card) card.remove(); card = null; document.body.dataset.tour = 'dismissed';
    try { localStorage.setItem(KEY, '1'); } catch (e) {} window.scrollTo(0, 0); };
  const hits = (a, b) => a.left < b.right && b.left < a.right && a.top < b.bottom && b.top < a.bottom;
  const shown = el => !!el && el.getClientRects().length > 0;   // on the open tab, not display: none
  const place = () => {
    if (!card) return;
    const el = document.querySelector(STEPS[at].selector);
    // a card whose target is on another tab waits, hidden, for that tab: it never points at
    // nothing, nor sits over the title and the tab bar
    card.style.visibility = shown(el) ? 'visible' : 'hidden';
    if (!shown(el)) return; const w = card.offsetWidth, h = card.offsetHeight;
    const W = document.documentElement.clientWidth, H = window.innerHeight, gap = 10;
    const r = el.getBoundingClientRect();
    const keep = [r, ...[...document.querySelectorAll('#buttons, #tabs, #header')].map(e => e.getBoundingClientRect())];
    const spots = [[r.left, r.bottom + gap], [r.right + gap, r.top], [r.left, r.top - h - gap],
                   [r.left - w - gap, r.top], [W - w - 16, H - h - 16], [16, H - h - 16]];
    let best = null;
    for (const [x0, y0] of spots) {
      const x = Math.max(8, Math.min(x0, W - w - 8)), y = Math.max(8, Math.min(y0, H - h - 8));
      const box = {left: x, right: x + w, top: y, bottom: y + h};
      if (!keep.some(k => hits(box, k))) { best = [x, y]; break; }
    }
    best = best || [Math.max(8, W - w - 16), Math.max(8, H - h - 16)];
    card.style.left = (best[0] + window.scrollX) + 'px';
    card.style.top = (best[1] + window.scrollY) + 'px';
  };
  const show = () => {
    clear();
    const step = STEPS[at], el = document.querySelector(step.selector);
    openTab(el);
    if (el) { el.scrollIntoView({block: 'nearest'}); el.classList.add('mv-tour-target'); }
    card.querySelector('.mv-tour-text').textContent = step.text;
    card.querySelector('.mv-tour-count').textContent = (at + 1) + ' / ' + STEPS.length;
    card.querySelector('[data-tour=back]').disabled = at === 0;
    card.querySelector('[data-tour=next]').textContent = at === STEPS.length - 1 ? 'Done' : 'Next';
    place();
  };
  const start = () => {
    if (!card) {
      card = document.createElement('div');
      card.id = 'tour'; card.setAttribute('role', 'dialog'); card.setAttribute('aria-label', 'Tour');
      card.innerHTML = '<div class="mv-tour-text"></div><div class="mv-tour-nav"><span class="mv-tour-count"></span>'
        + '<button data-tour="back">Back</button><button data-tour="next">Next</button>'
        + '<button data-tour="close" title="Close the tour for good">Close</button></div>';
      card.addEventListener('click', ev => {
        const b = ev.target.closest('button'); if (!b) return;
        if (b.dataset.tour === 'close' || (b.dataset.tour === 'next' && at === STEPS.length - 1)) return end();
        at += b.dataset.tour === 'next' ? 1 : -1; show();
      });
      document.body.appendChild(card);
    }
    at = 0; show(); document.body.dataset.tour = 'shown';
  };
  let waiting = false;   // a page opened on another tab (?tab=...) starts the tour once the first step's target shows
  const ready = () => {
    if (waiting && shown(document.querySelector(STEPS[0].selector))) { waiting = false; start(); } };
  // a run fills the panes, a tab opens, the window changes size: the card moves with its target
  new ResizeObserver(() => { ready(); place(); }).observe(document.body);
  window.addEventListener('resize', place);
  document.addEventListener('click', ev => {
    // an open explanation (the ⓘ popovers) closes on a click anywhere outside it
    document.querySelectorAll('details.mv-explain[open]').forEach(d => { if (!d.contains(ev.target)) d.open = false; });
    if (ev.target.closest('[role=tab]')) setTimeout(() => { ready(); place(); }, 0);
    if (ev.target.closest('[data-tour-start]')) { ev.preventDefault(); start(); }
    if (ev.target.closest('#share-link')) { const b = document.querySelector('#share-build'); if (b) b.click(); }
    // in-page links scroll here: Gradio's <base href> would turn "#x" into a new page load
    // that drops the deep link; a link to a section of another tab opens it, and a link to a
    // collapsed section opens that
    const to = ev.target.closest('.mv-links a[href^="#"]'), el = to && document.querySelector(to.getAttribute('href'));
    if (!el) return;
    ev.preventDefault();
    openTab(el);
    const box = el.querySelector('details');
    if (box) box.open = true;
    el.scrollIntoView({block: 'start'});
  });
  document.addEventListener('keydown', ev => {   // Escape closes an open popover first, then the tour
    const open = ev.key === 'Escape' ? document.querySelectorAll('details.mv-explain[open]') : [];
    if (open.length) open.forEach(d => { d.open = false; }); else if (ev.key === 'Escape' && card) end(); });
  let seen = false; try { seen = localStorage.getItem(KEY) === '1'; } catch (e) {}
  if (seen) document.body.dataset.tour = 'dismissed';
  else setTimeout(() => { waiting = true; document.body.dataset.tour = 'waiting'; ready(); }, 300);
}""" % (json.dumps(TOUR_KEY), json.dumps(explain.tour_payload()), json.dumps(PRESENTER_CLASS))
