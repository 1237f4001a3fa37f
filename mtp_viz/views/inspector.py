"""The token inspector (``#inspector``): one token's decision, from its run's events.

Pure: events in, HTML out, no gradio, no torch. For the token a visitor clicked it
shows the target's top candidates with their p (rows with ``data-p``), for a draft the
drafter's with their q (``data-q``), the acceptance probability min(1, p/q) of the
draft (``data-acceptance``) and the verdict (``data-verdict``), and for a correction
under sampling the residual norm(max(0, p − q)) it was drawn from (``data-residual``).
The candidates are what the engine recorded (``top=k``, see :mod:`mtp_viz.engine.topk`);
model text is escaped.
"""
from __future__ import annotations

import html
from dataclasses import dataclass
from typing import Sequence

from mtp_viz.engine.events import Accepted, Bonus, Drafted, Event, Rejected, Start, Token

from .tokens import escape_token

TOP = 5  # candidates per position the app asks the engine to record for the inspector
KINDS = {"accepted": Accepted, "rejected": Rejected, "bonus": Bonus, "token": Token}


def acceptance(p: float, q: float) -> float:
    """min(1, p/q): the chance that speculative sampling keeps a draft with these
    probabilities (q > 0 for any draft that was drawn from q)."""
    return 1.0 if q <= 0 else min(1.0, p / q)


@dataclass(frozen=True)
class Picked:
    """The clicked token's event and what its decision depended on."""
    event: Event
    greedy: bool
    drafted: Drafted | None = None      # a draft's own drafted event (its q and q_top)
    correction: Bonus | None = None     # a rejected draft's step: the target's replacement
    first_rejected: int | None = None   # the index of the step's first rejected draft


def find(events: Sequence[Event], kind: str, step: int, index: int = 0) -> Picked | None:
    """The event behind a pane's token (its ``data-kind``, ``data-step``, ``data-index``)."""
    cls = KINDS.get(kind)
    start = next((e for e in events if isinstance(e, Start)), None)
    if cls is None or start is None:
        return None
    greedy = not start.settings.get("temperature")
    same = [e for e in events if getattr(e, "step", None) == step]
    hit = next((e for e in same if isinstance(e, cls) and (cls is Token or e.index == index)), None)
    if hit is None:
        return None
    drafted = next((e for e in same if isinstance(e, Drafted) and e.index == index), None) \
        if isinstance(hit, (Accepted, Rejected)) else None
    correction = next((e for e in same if isinstance(e, Bonus) and e.kind == "correction"), None)
    first = min((e.index for e in same if isinstance(e, Rejected)), default=None)
    return Picked(hit, greedy, drafted, correction, first)


def _rows(attr: str, ids: Sequence[int], probs: Sequence[float], texts: Sequence[str], mark: int) -> str:
    """One row per candidate: its text, a bar and its probability; ``mark`` is the
    clicked token (highlighted where it is among them)."""
    out = []
    for i, (tok, prob) in enumerate(zip(ids, probs)):
        text, _ = escape_token(texts[i] if i < len(texts) else "", tok, breaks=False)
        cls = ' class="mv-here"' if tok == mark else ""
        out.append(f'<tr data-{attr}="{prob:.6f}" data-token-id="{tok}"{cls}><td class="mv-cand">{text}</td>'
                   f'<td><span class="mv-bar" style="width:{max(prob, 0.0) * 80:.1f}px"></span></td>'
                   f'<td class="mv-num">{prob:.3f}</td></tr>')
    return "".join(out)


def _table(title: str, attr: str, ids, probs, texts, mark: int) -> str:
    if not ids:
        return ""
    return (f'<table class="mv-insp-{attr}"><caption>{html.escape(title)}</caption>'
            f'{_rows(attr, ids, probs, texts, mark)}</table>')


def _name(text: str, token_id: int) -> str:
    return f"<code>{escape_token(text, token_id, breaks=False)[0]}</code>"


def _top_name(e) -> str:
    if not e.p_top_ids:
        return "the target's own choice"
    return _name(e.p_top_text[0] if e.p_top_text else "", e.p_top_ids[0])


def _verdict(pk: Picked) -> tuple[str, str]:
    """(verdict word, one or two sentences of why)."""
    e = pk.event
    if isinstance(e, Token):
        how = "its most likely token" if pk.greedy else "a draw from p"
        return "token", f"Plain decoding: one target forward, {how}."
    if isinstance(e, Bonus):
        if e.kind == "correction":
            how = ("the target's most likely token here" if pk.greedy else
                   "drawn from the residual norm(max(0, p − q)), so that the text still follows p exactly")
            return "correction", f"The target's own token in place of the rejected draft: {how}."
        how = "its most likely token" if pk.greedy else "a draw from p"
        return "bonus", f"Every draft of this step was kept, so the target adds one token of its own for free: {how}."
    a = acceptance(e.p, e.q)
    if isinstance(e, Accepted):
        if pk.greedy:
            return "accepted", "Greedy decoding keeps a draft when it is the target's most likely token, as here."
        return "accepted", (f"Kept with probability min(1, p/q) = {a:.3f}" +
                            (": p ≥ q, so always." if a >= 1 else ", and the uniform draw fell below it."))
    if pk.first_rejected is not None and e.index > pk.first_rejected:
        return "rejected", (f"Never tested: it was drafted after draft {pk.first_rejected + 1}, which the target "
                            "rejected, so it followed a token that is no longer in the text.")
    if pk.greedy:
        return "rejected", (f"Greedy decoding keeps only the target's most likely token, here {_top_name(e)}, "
                            "not this draft.")
    return "rejected", (f"The uniform draw fell at or above min(1, p/q) = {a:.3f}; the correction was drawn "
                        "from the residual.")


def _clusters_note(pk: Picked) -> str:
    e = pk.event
    if not isinstance(e, Rejected) or not e.target_in_clusters:
        return ""
    n = len(pk.drafted.clusters) if pk.drafted and pk.drafted.clusters else 0
    scored = f"the {n} clusters" if n else "the clusters"
    if e.target_in_clusters == "yes":
        return (f"Clustered head: the target's choice {_top_name(e)} was a candidate (its cluster was among "
                f"{scored} the drafter scored), ranked lower than this draft.")
    return (f"Clustered head: the target's choice {_top_name(e)} was never a candidate: its cluster was not "
            f"among {scored} the drafter scored, so it only had the shared floor logit.")


def inspector_html(pk: Picked | None) -> str:
    """The inspector for one token, or a one-line note when there is none."""
    if pk is None:
        return ('<div class="mv-inspector mv-insp-empty"><button class="mv-close" title="Close">×</button>'
                'That token is not in the run shown; run or replay again.</div>')
    e = pk.event
    where = (f"forward {e.step}" if isinstance(e, Token) else
             f"step {e.step} · position {e.index + 1}")
    verdict, why = _verdict(pk)
    parts = [f'<div class="mv-insp-head"><span class="mv-insp-token">{_name(e.text, e.token_id)}</span> '
             f'{html.escape(e.type)} · {html.escape(where)}'
             f'<button class="mv-close" title="Close">×</button></div>']
    if isinstance(e, (Accepted, Rejected)):
        a = acceptance(e.p, e.q)
        parts.append(f'<div class="mv-insp-accept" data-acceptance="{a:.6f}" data-p-token="{e.p:.6f}" '
                     f'data-q-token="{e.q:.6f}">min(1, p/q) = min(1, {e.p:.3f} / {e.q:.3f}) = <b>{a:.3f}</b></div>')
    parts.append(f'<div class="mv-insp-verdict" data-verdict="{verdict}"><b>{verdict}</b> · {why}</div>')
    if pk.greedy and not isinstance(e, (Token, Bonus)):
        parts.append('<p class="mv-insp-note">Greedy run: p and q are the softmax of the raw logits; '
                     'min(1, p/q) is the chance that sampling at temperature 1 would keep this draft.</p>')
    cols = [_table("target p", "p", e.p_top_ids, e.p_top, e.p_top_text, e.token_id)]
    d = pk.drafted
    if d is not None:
        cols.append(_table("drafter q", "q", d.q_top_ids, d.q_top, d.q_top_text, e.token_id))
    residual_from = e if isinstance(e, Bonus) else (
        pk.correction if isinstance(e, Rejected) and e.index == pk.first_rejected else None)
    if residual_from is not None and residual_from.residual_top_ids:
        cols.append(_table("residual norm(max(0, p − q))", "residual", residual_from.residual_top_ids,
                           residual_from.residual_top, residual_from.residual_top_text, residual_from.token_id))
    if any(cols):
        parts.append(f'<div class="mv-insp-cols">{"".join(cols)}</div>')
    else:
        parts.append('<p class="mv-insp-note">This run carries no top candidates (a trace recorded without '
                     'them, or an API run).</p>')
    note = _clusters_note(pk)
    if note:
        parts.append(f'<p class="mv-insp-note" data-clusters="{html.escape(e.target_in_clusters)}">{note}</p>')
    return (f'<div class="mv-inspector" data-kind="{e.type}" data-step="{e.step}" '
            f'data-index="{getattr(e, "index", 0)}">{"".join(parts)}</div>')


__all__ = ["Picked", "acceptance", "find", "inspector_html"]
