"""Pure views of a finished run's numbers: the "measured vs theory" panel.

Numbers come from :mod:`mtp_viz.analysis.metrics`; this module only lays them out. All text
is HTML-escaped.
"""
from __future__ import annotations

import html

from mtp_viz.analysis.experts import ceiling
from mtp_viz.analysis.metrics import TheoryCheck
from mtp_viz.analysis.whatif import what_if

# the panel's speedup is the last Run's (one run of each mode); Measure's, over its repeats,
# sits above it on the same tab (#measure-result), so the two are never read as one figure
LAST_RUN = "the last Run, one run each; Measure's repeats: above"


def theory_panel_html(check: TheoryCheck | None) -> str:
    """Measured numbers beside Leviathan et al.'s prediction, and acceptance per position."""
    if check is None:
        return ('<div class="mtp-theory"><p>No drafted tokens yet: the theory panel '
                'needs a speculative run.</p></div>')
    rows = [
        ("acceptance rate (accepted ÷ drafted)", f"{check.acceptance_rate:.1%}", ""),
        ("α (per-token acceptance, MLE)", f"{check.alpha:.3f}", ""),
        ("mean draft length γ", f"{check.draft_tokens:.2f}", ""),
        ("tokens per target forward τ", f"{check.tau:.2f}" if check.tau is not None else "–",
         f"{check.tau_predicted:.2f} = (1−α^(γ+1))/(1−α)"),
    ]
    if check.experts_touched is not None:
        k, total = check.experts_top_k, check.experts_total
        rows.append(("experts per layer per verification", f"{check.experts_touched:.2f}",
                     f"{k} for one plain step; at most {ceiling(round(check.draft_tokens), k, total)} of {total} "
                     f"for γ+1 tokens"))
    if check.timed:
        rows += _cost_rows(check)
    else:  # no draft and verify times: no c, so no predicted speedup
        if check.speedup_measured is not None:
            rows.append((f"speedup over the baseline ({LAST_RUN})", f"×{check.speedup_measured:.2f}", ""))
        rows.append(("cost coefficient c, predicted speedup", "not reported",
                     "the source gives no drafting or verification times (a vLLM server does not)"))
    body = "".join(f"<tr><td>{html.escape(a)}</td><td>{html.escape(b)}</td><td>{html.escape(t)}</td></tr>"
                   for a, b, t in rows)
    bars = []
    for k, (cond, unc) in enumerate(zip(check.per_position_conditional,
                                        check.per_position_unconditional)):
        if cond is None and unc is None:
            continue
        cv, uv = cond or 0.0, unc or 0.0
        bars.append(
            f'<div class="mtp-pos"><span>{k + 1}</span>'
            f'<span class="mtp-bar" style="display:inline-block;width:{cv * 120:.0f}px;'
            f'background:#4c9be8;height:0.8em" title="conditional {cv:.0%}"></span> '
            f'{cv:.0%} <small>(unconditional {uv:.0%})</small></div>')
    return ('<div class="mtp-theory"><table><thead><tr><th>measure</th><th>measured</th>'
            f'<th>theory</th></tr></thead><tbody>{body}</tbody></table>'
            '<p><b>Acceptance by draft position</b> (given the earlier drafts were '
            f'accepted)</p>{"".join(bars)}</div>')


def _cost_rows(check: TheoryCheck) -> list[tuple[str, str, str]]:
    """The rows that need the run's timings: c, the speedups and γ*."""
    rows = [("cost coefficient c", f"{check.c:.3f}", "drafter step ÷ target step")]
    if check.speedup_measured is not None:
        rows.append((f"speedup over autoregressive ({LAST_RUN})", f"×{check.speedup_measured:.2f}",
                     f"×{check.speedup_predicted:.2f} = τ/(γc+1)"))
    else:
        rows.append(("predicted speedup", "", f"×{check.speedup_predicted:.2f} = τ/(γc+1)"))
    if check.v is not None:
        rows.append(("verification cost v (in target steps)", f"{check.v:.2f}",
                     f"×{check.speedup_predicted_v:.2f} = τ/(γc+v) predicted with this v"))
    elif check.v_raw is not None:
        rows.append(("verification cost v (in target steps)", "too noisy",
                     f"measured {check.v_raw:.2f}, below one target step: timing noise"))
    # one best draft length on the tab: the What-if's (acceptance by position, the verification
    # cost measured), not a second one from a single α that could name another γ beside it
    w = what_if(check)
    if w is not None:
        rows.append(("best draft length γ*", "",
                     f"{w.best} (×{w.best_row.speedup:.2f} estimated: the What-if below)"))
    return rows
