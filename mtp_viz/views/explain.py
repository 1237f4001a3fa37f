"""Pure views for teaching: panel explanations, the glossary, the what-if table, the
"when does MTP help?" panel and the tour's steps. Data in, HTML out; every text that
did not come from this module is escaped.
"""
from __future__ import annotations

import html
from typing import Any, Iterable, Sequence

from mtp_viz.analysis.whatif import WhatIf

from . import charts

# Two sentences per panel, shown in a collapsed <details> beside the panel's title; the
# charts' own come from their entries in charts.CHARTS.
EXPLAIN: dict[str, tuple[str, str]] = {
    "compare": ("How to read the speedup",
                "The badge divides the speculative run's tokens per second by plain decoding's, one run "
                "each, taking turns and each timed only while it ran (with one torch thread on a CPU, by "
                "the engine's CPU time), so it still scatters and Measure gives the median of several. "
                "Under greedy decoding both texts must match token for token: speculative decoding "
                "changes the speed, never the output."),
    "spec": ("What the speculative pane shows",
             "Each verification step the drafter proposes a few tokens and the target checks them all in "
             "one forward pass: it keeps the longest correct prefix (green) and adds one token of its own "
             "(a correction after a rejection, or a bonus when every draft was right). Struck-out tokens "
             "are drafts the target refused; they never become part of the text."),
    "ar": ("What the plain pane shows",
           "Plain decoding: one target forward per token, the baseline every speedup is measured against, "
           "with greedy decoding exactly the speculative pane's text. The two runs take turns on one thread, "
           "each timed only while it runs, so the panes race fairly as they fill."),
    "legend": ("Why shapes as well as colours",
               "Each token kind has its own shape (underline, box, double underline, strike-through, dotted "
               "frame), so it reads on a washed-out projector and for colour-blind viewers. Presenter mode "
               "(?presenter=1 in the address) switches to larger type and a colour-blind-safe palette."),
    "theory": ("Measured vs theory",
               "The run's own acceptance α, draft length γ and cost c, put into Leviathan et al.'s formula "
               "for the expected tokens per forward and speedup. Where measurement and prediction differ, "
               "something the formula assumes (equal acceptance at every position, free verification) "
               "does not hold here."),
    "what-if": ("What-if",
                "The run's measured acceptance at each draft position and its measured costs, used to "
                "estimate what other constant draft lengths would have given. It is an estimate: only a "
                "run at that length measures it, and rows beyond the positions this run judged reuse the "
                "last measured acceptance."),
    "when-mtp-helps": ("When does MTP help?",
                       "Speculative decoding pays when the target's next tokens are easy to guess and a "
                       "guess is much cheaper than a target forward. It loses when drafts are mostly "
                       "rejected, or when verifying several tokens costs much more than producing one."),
}
EXPLAIN.update({c.id: (c.title, c.explanation) for c in charts.CHARTS})

GLOSSARY: tuple[tuple[str, str, str], ...] = (
    ("draft", "draft", "A token proposed by the small drafter model before the target has checked it; "
     "one step drafts γ of them, one after another."),
    ("verify", "verify", "The target's single forward pass over all of a step's drafts at once, which gives "
     "its own prediction at every drafted position."),
    ("acceptance rate", "acceptance-rate", "Accepted drafts ÷ drafted tokens over a run. Drafts after a "
     "rejection are never judged but still count as drafted, so this understates α when γ > 1."),
    ("α (alpha)", "alpha", "The probability that the target accepts one draft, given the earlier ones were "
     "accepted; estimated as accepted ÷ (accepted + rejections)."),
    ("τ (tokens per target forward)", "tau", "New tokens per target forward after the prefill, the "
     "target's own token included: (new tokens − 1) ÷ (forwards − 1), the prefill's forward and its first "
     "token left out. Plain decoding has τ = 1; with γ drafts τ is at most γ + 1."),
    ("bonus token", "bonus-token", "The token the target adds from its own verify pass when every draft was "
     "accepted: one more token for free."),
    ("correction", "correction", "The target's own token at the first rejected position; it replaces the "
     "rejected draft, so a step always yields at least one token."),
    ("γ and γ* (draft length, best draft length)", "gamma", "γ is the draft length, the number of tokens drafted per "
     "step; γ* is the draft length with the highest estimated speedup for this run's acceptance by position "
     "and its measured costs (the What-if table; the theory panel names the same one)."),
    ("cost coefficient c", "cost-coefficient", "The time of one drafter step ÷ the time of one target "
     "step. The predicted speedup is τ ÷ (γc + 1): each draft costs c target steps."),
    ("MTP (multi-token prediction)", "mtp", "Google's name for Gemma 4's drafters: small models that "
     "predict several next tokens from the target's own activations, so the target can verify them at once."),
    ("shared KV cache", "shared-kv-cache", "The Gemma 4 MTP drafter keeps no attention cache of its own; "
     "it attends to the target's keys and values, so it needs few layers and little memory."),
    ("clustered head", "clustered-head", "The E2B/E4B drafters' efficient output layer: tokens are grouped "
     "into clusters, the drafter scores the clusters first and then only the tokens in the best ones."),
    ("eager engine", "eager-engine", "mtp-viz's own decoder running the model as PyTorch code, one operation "
     "at a time: what the speedup badge is over unless it says compiled."),
    ("compiled engine", "compiled-engine", "The same decoder with a fixed-size KV cache and each forward "
     "compiled once into one graph (torch.compile), which removes Python's per-layer overhead; compiling "
     "happens before the first token and is never counted in a run's time."),
    ("engine CPU time", "engine-cpu-time", "With one torch thread on a CPU, a run is timed by the CPU time "
     "of the thread that decodes it, so waiting for a core shared with other visitors is left out; "
     "otherwise runs are timed on the wall clock."),
)

# The tour: (selector it points at, text). The page's script walks through them once.
TOUR_STEPS: tuple[tuple[str, str], ...] = (
    ("#prompt", "Type a prompt here, or pick one of the examples beside Run."),
    ("#run", "Run generates with speculative decoding, then with plain decoding, and compares the speed."),
    ("#panes", "Left: the drafter's proposals as the target accepts or rejects them. Right: plain "
               "decoding, one target forward per token."),
    ("#live-charts", "These charts fill as the run goes: the share of each step's drafts the target kept, "
                     "and how many tokens the drafter proposed."),
    ("#tabs", "The tabs hold the rest: Inside a step (every chart, the drafter's "
              "anatomy), Measure (theory, what-if, when MTP helps) and Learn (what each panel shows, the "
              "glossary)."),
)


# The "i" in a circle, drawn: U+24D8 (ⓘ) is missing from the fonts a Debian Chromium has,
# where it showed as an empty box. Its colour is the summary's (currentColor).
INFO_ICON = ('<svg class="mv-info" viewBox="0 0 16 16" width="15" height="15" aria-hidden="true" '
             'focusable="false"><circle cx="8" cy="8" r="7" fill="none" stroke="currentColor" '
             'stroke-width="1.5"/><circle cx="8" cy="4.7" r="1.1" fill="currentColor"/>'
             '<rect x="7.1" y="6.8" width="1.8" height="5.4" rx="0.6" fill="currentColor"/></svg>')


def explain(key: str, corner: bool = False) -> str:
    """A collapsed explanation (``<details data-explain=key>``) of one panel."""
    title, text = EXPLAIN[key]
    cls = "mv-explain mv-corner" if corner else "mv-explain"
    return (f'<details class="{cls}" data-explain="{html.escape(key)}"><summary title="{html.escape(title)}" '
            f'aria-label="About: {html.escape(title)}">{INFO_ICON}</summary>'
            f'<div class="mv-explain-body"><b>{html.escape(title)}.</b> {html.escape(text)}'
            '</div></details>')


def explanations(keys: Iterable[str], lead: str) -> str:
    """One row of labelled explanations, e.g. one per chart."""
    items = "".join(f'<span class="mv-explain-item">{html.escape(EXPLAIN[k][0])} {explain(k)}</span>'
                    for k in keys)
    return f'<div class="mv-explain-row"><span>{html.escape(lead)}</span>{items}</div>'


def header_links() -> str:
    return ('<span class="mv-links"><a href="#" data-tour-start>Tour</a> · <a href="#glossary">Glossary</a>'
            ' · <a href="#when-mtp-helps">When does MTP help?</a> · <button type="button" id="share-link" '
            'class="mv-linkbtn" title="A link that opens this page with the current prompt, pair and settings">'
            'Copy link</button></span>')


def glossary_html() -> str:
    rows = "".join(f'<dt data-term="{slug}">{html.escape(term)}</dt><dd>{html.escape(text)}</dd>'
                   for term, slug, text in GLOSSARY)
    return f'<div class="mv-glossary"><h3>Glossary</h3><dl>{rows}</dl></div>'


def learn_html(tab_ids: Sequence[str]) -> str:
    """The Learn tab's head: the tour, the tabs a link can open (``?tab=``), and what
    every panel shows (its explanation, open)."""
    rows = "".join(f'<dt data-explain-key="{html.escape(k)}">{html.escape(title)}</dt><dd>{html.escape(text)}</dd>'
                   for k, (title, text) in EXPLAIN.items())
    return ('<div class="mv-glossary mv-learn"><h3>Learn</h3><p><a href="#" data-tour-start>Take the tour</a> '
            f'({len(TOUR_STEPS)} steps over the first tab), or read what each panel shows. A link opens a tab: '
            f'add <code>?tab=</code> and one of {", ".join(f"<code>{html.escape(t)}</code>" for t in tab_ids)} '
            f'to the address.</p><h3>What each panel shows</h3><dl>{rows}</dl></div>')


def what_if_html(w: WhatIf | None,
                 empty: str = "Appears after a speculative run that judged at least one draft.") -> str:
    """The estimate as a table with a bar per draft length; the best measured row marked."""
    head = f'<h3>What-if: other draft lengths <small>(an estimate)</small> {explain("what-if")}</h3>'
    if w is None:
        return f'<div class="mv-whatif">{head}<p class="mv-empty">{html.escape(empty)}</p></div>'
    top = max(r.speedup for r in w.rows) or 1.0
    body = []
    for r in w.rows:
        best = r.draft_tokens == w.best
        cls = " ".join(c for c in ("mv-best" if best else "", "mv-extra" if r.extrapolated else "") if c)
        mark = " ★ γ*, best by this run's data" if best else (" (extrapolated)" if r.extrapolated else "")
        body.append(
            f'<tr class="{cls}" data-gamma="{r.draft_tokens}" data-tau="{r.tau:.4f}" data-speedup="{r.speedup:.4f}"'
            f'{" data-best" if best else ""}><td>{r.draft_tokens}</td><td>{r.tau:.2f}</td><td>×{r.speedup:.2f}</td>'
            f'<td><span class="mv-bar" style="width:{120 * r.speedup / top:.0f}px"></span>{mark}</td></tr>')
    alphas = ", ".join(f"{a:.2f}" for a in w.alphas)
    measured = "" if w.run_speedup is None else f" and a speedup of ×{w.run_speedup:.2f} (one run each)"
    cost = (f"c = {w.c:.3f}, verification adds {w.slope:.3f} target steps per draft (from the baseline)"
            if w.slope else f"c = {w.c:.3f}; verification counted as one target step (no usable baseline timing)")
    return (f'<div class="mv-whatif" data-best="{w.best}">{head}'
            f'<p>Estimated from this run: acceptance by position {html.escape(alphas)}; {html.escape(cost)}. '
            f'The run itself drafted {w.run_draft_tokens:.2f} tokens per step and measured τ = {w.run_tau:.2f}'
            f'{measured}.</p>'
            '<table><thead><tr><th>draft length γ</th><th>τ (estimated)</th><th>speedup (estimated)</th>'
            f'<th></th></tr></thead><tbody>{"".join(body)}</tbody></table></div>')


def _cell(entry: dict | None) -> str:
    if not entry:
        return "–"
    return f'×{entry["speedup"]:.2f} · α {entry["alpha"]:.2f}'


def bench_setting(bench: dict) -> str | None:
    """The setting a results file is summarized by: constant-4 if it ran, else its first."""
    names = [s["setting"] for s in bench.get("settings", [])]
    return "constant-4" if "constant-4" in names else (names[0] if names else None)


def when_helps_html(categories: Sequence[str], titles: dict[str, list[str]],
                    results: Sequence[tuple[str, str, dict]], moe_note: str) -> str:
    """The "when does MTP help?" panel: the prompt categories, what to expect of each
    (a general expectation, stated as one), and the measured results that exist, each
    labelled with its file. ``results``: (source path, the file's note, bench.json)."""
    expect = {
        "code": "syntax, indentation and repeated names are easy to guess: usually the best case",
        "structured": "JSON keys, brackets and copied values are predictable: usually a good case",
        "summarization": "much of the answer copies phrases from the prompt: often good",
        "translation": "follows the source sentence closely: often good",
        "chat": "open wording, many equally good continuations: middling",
        "creative": "the least predictable text, worse still with sampling at high temperature",
    }
    items = "".join(
        f'<li data-category="{html.escape(c)}"><b>{html.escape(c)}</b>: {html.escape(expect.get(c, ""))}'
        f'<br><small>Example prompts: {html.escape(", ".join(titles.get(c, [])))}</small></li>'
        for c in categories)
    parts = [f'<h3>When does MTP help? {explain("when-mtp-helps")}</h3>',
             '<p>What to expect by prompt category (a general expectation, not a measurement: pick a prompt '
             'of the category from the examples and press <b>Measure</b> to see it on the loaded pair):</p>',
             f'<ul>{items}</ul>']
    if results:
        cols = list(categories) + sorted({c["category"] for _, _, b in results for c in b.get("categories", [])}
                                         - set(categories))
        rows = []
        for source, note, bench in results:
            setting = bench_setting(bench)
            by = {c["category"]: c.get(setting) for c in bench.get("categories", [])}
            cells = "".join(f"<td>{_cell(by.get(c))}</td>" for c in cols)
            rows.append(f'<tr data-source="{html.escape(source)}"><td><code>{html.escape(source)}</code>'
                        f'<br><small>{html.escape(note)}</small></td><td>{html.escape(setting or "")}</td>'
                        f'{cells}</tr>')
        header = "".join(f"<th>{html.escape(c)}</th>" for c in cols)
        parts.append('<p><b>Measured</b> by <code>mtp-viz bench</code> in this repository (speedup over plain '
                     'decoding · α), read from the results files named in the first column; small CPU pairs, '
                     'not Gemma 4 checkpoints:</p>'
                     f'<div class="mv-scroll"><table><thead><tr><th>results file</th><th>setting</th>{header}'
                     f'</tr></thead><tbody>{"".join(rows)}</tbody></table></div>')
    else:
        parts.append('<p>No benchmark results ship with this installation, so no measured numbers are shown '
                     'here.</p>')
    parts.append(f'<p class="mv-caveat"><b>Mixture of experts.</b> {html.escape(moe_note)}</p>')
    return f'<div class="mv-when">{"".join(parts)}</div>'


def tour_payload() -> list[dict[str, Any]]:
    """The tour's steps for the page's script."""
    return [{"selector": s, "text": t} for s, t in TOUR_STEPS]
