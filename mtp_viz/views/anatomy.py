"""The anatomy panel (``#anatomy``): the loaded pair's MTP drafter as a diagram.

Pure: an :class:`mtp_viz.analysis.anatomy.Anatomy` (plain numbers read from the loaded modules)
and a run's events in, HTML with an inline SVG out. The panel's root carries the
numbers as data attributes (``data-target-layers``, ``data-target-width``,
``data-drafter-layers``, ``data-drafter-width``, ``data-centroids``, for a
mixture-of-experts target ``data-moe-layers``, ``data-experts``, ``data-top-k-experts``, and
what each model runs in: ``data-target-precision``, ``data-drafter-precision``); model
names are escaped.
"""
from __future__ import annotations

import html
from typing import Sequence

from mtp_viz.analysis.anatomy import Anatomy
from mtp_viz.engine.events import Event, Rejected

W, H = 980, 380  # the diagram's coordinate box (it scales to the panel's width)


def _box(x: int, y: int, w: int, h: int, title: str, *lines: str, cls: str = "") -> str:
    text = [f'<text x="{x + w / 2:.0f}" y="{y + 18}" class="mv-an-title">{html.escape(title)}</text>']
    text += [f'<text x="{x + w / 2:.0f}" y="{y + 36 + 15 * i}">{html.escape(s)}</text>' for i, s in enumerate(lines)]
    return (f'<g class="mv-an-box {cls}"><rect x="{x}" y="{y}" width="{w}" height="{h}" rx="7"/>'
            f'{"".join(text)}</g>')


def _arrow(x1: float, y1: float, x2: float, y2: float, label: str = "", dashed: bool = False) -> str:
    dash = ' stroke-dasharray="5 4"' if dashed else ""
    out = f'<line x1="{x1}" y1="{y1}" x2="{x2}" y2="{y2}" marker-end="url(#mv-an-head)"{dash}/>'
    if label and x1 == x2:  # a vertical arrow: the label beside it
        out += (f'<text x="{x1 + 7}" y="{(y1 + y2) / 2 + 4:.0f}" class="mv-an-edge" '
                f'style="text-anchor:start">{html.escape(label)}</text>')
    elif label:
        out += (f'<text x="{(x1 + x2) / 2:.0f}" y="{(y1 + y2) / 2 - 5:.0f}" class="mv-an-edge">'
                f'{html.escape(label)}</text>')
    return out


def _svg(a: Anatomy) -> str:
    kv = "; ".join(f"{'full' if layer.attention == 'full_attention' else 'sliding'}: target layer "
                   f"{layer.reads_target_layer}" for layer in a.layers)
    kv_shape = ", ".join(sorted({f"{layer.kv_heads}×{layer.head_dim}" for layer in a.layers}))
    c = a.clustered
    head = (_box(660, 150, 190, 110, "clustered head", f"{c.centroids} centroids",
                 f"top {c.top_clusters} clusters scored", f"{c.candidates} candidate tokens",
                 f"of {a.vocab}; others: floor", cls="mv-an-head")
            if c else _box(660, 150, 190, 110, "lm_head", f"{a.drafter_width} → {a.vocab}",
                           "full softmax", "no clustered head", cls="mv-an-head"))
    moe = (f"{a.experts.num_experts} experts, top {a.experts.top_k} per token",) if a.experts else ()
    parts = [
        _box(10, 20, 200, 80, "target", f"{a.target_layers} layers × width {a.target_width}",
             f"vocabulary {a.vocab}", *moe, cls="mv-an-target"),
        _box(440, 20, 330, 80, "target's shared KV (read only)", kv, f"K/V heads × dim: {kv_shape}",
             cls="mv-an-kv"),
        _box(10, 150, 200, 110, "input of draft j", f"concat(E[last token] ({a.target_width}),",
             f"h ({a.target_width})) = {a.input_width}", "h: target's last hidden state,",
             "then the drafter's own"),
        _box(250, 150, 150, 110, "pre_projection", f"{a.input_width} → {a.projected_width}", cls="mv-an-proj"),
        _box(440, 150, 180, 110, f"{a.drafter_layers} drafter layer{'s' if a.drafter_layers != 1 else ''}",
             f"width {a.drafter_width}", "one constant position", "no KV cache of its own"),
        head,
        _box(440, 290, 180, 80, "post_projection", f"{a.drafter_width} → {a.state_width}",
             "the state for the next draft", cls="mv-an-proj"),
        _arrow(110, 100, 110, 148, "h, E"),
        _arrow(210, 60, 438, 60, "K/V of its last layers"),
        _arrow(530, 100, 530, 148, "attends"),
        _arrow(210, 205, 248, 205),
        _arrow(400, 205, 438, 205),
        _arrow(620, 205, 658, 205),
        _arrow(850, 205, 968, 205, "draft j"),
        _arrow(530, 260, 530, 288),
        '<path d="M440 330 H110 V262" fill="none" marker-end="url(#mv-an-head)" stroke-dasharray="5 4"/>'
        '<text x="275" y="322" class="mv-an-edge">fed to draft j+1, with E[draft j]</text>',
    ]
    return (f'<svg viewBox="0 0 {W} {H + 2}" role="img" aria-label="Anatomy of the MTP drafter">'
            '<defs><marker id="mv-an-head" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="7" '
            'markerHeight="7" orient="auto-start-reverse"><path d="M0 0 L10 5 L0 10 z"/></marker></defs>'
            f'{"".join(parts)}</svg>')


def _rejections(a: Anatomy, events: Sequence[Event]) -> str:
    """For each rejected draft of the run: was the target's token among the candidates?"""
    rejected = [e for e in events if isinstance(e, Rejected)]
    if a.clustered is None:
        return (f'<p class="mv-an-clusters" data-clusters="none">This drafter has no clustered head: its '
                f'lm_head scores all {a.vocab} tokens for every draft, so every token is a candidate and a '
                'rejection is always "it was a candidate, ranked lower".</p>')
    known = [e for e in rejected if e.target_in_clusters]
    if not known:
        return ('<p class="mv-an-clusters">Run a prompt to see, for each rejected draft, whether the target\'s '
                'token was among the clusters the drafter scored.</p>')
    outside = [e for e in known if e.target_in_clusters == "no"]
    items = "".join(f'<li data-step="{e.step}" data-index="{e.index}" '
                    f'data-in-clusters="{html.escape(str(e.target_in_clusters), quote=True)}">'
                    f'step {e.step}, draft {e.index + 1}: '
                    f'{"never a candidate" if e.target_in_clusters == "no" else "a candidate, ranked lower"}</li>'
                    for e in known[:40])
    more = f"<li>… and {len(known) - 40} more</li>" if len(known) > 40 else ""
    return (f'<p class="mv-an-clusters" data-outside="{len(outside)}" data-rejected="{len(known)}">Of this run\'s '
            f'{len(known)} rejected drafts, the target\'s most likely token was <b>never a candidate</b> '
            f'(outside the {a.clustered.top_clusters} clusters scored) for {len(outside)}, and a candidate '
            f'ranked lower for {len(known) - len(outside)}.</p><ul class="mv-an-list">{items}{more}</ul>')


def _experts(a: Anatomy) -> str:
    """The target's mixture of experts, and what it means for verifying drafts."""
    x = a.experts
    if x is None:
        return ""
    return (f'<p class="mv-an-experts" data-moe-layers="{x.layers}" data-experts="{x.num_experts}" '
            f'data-top-k-experts="{x.top_k}">The target is a <b>mixture of experts</b>: each of its {x.layers} '
            f'layers keeps a dense MLP of width {x.mlp_width} and adds {x.num_experts} experts of width '
            f'{x.expert_width}, and its router sends every token to {x.top_k} of them (an active MLP width of '
            f'{x.active_width}). One plain step reads {x.top_k} experts per layer; verifying γ drafts sends '
            f'γ+1 tokens, which may read up to min({x.num_experts}, {x.top_k}·(γ+1)) (see “Experts touched per '
            'verification”).</p>')


def anatomy_html(a: Anatomy | None, events: Sequence[Event] = ()) -> str:
    """The panel: the diagram with the pair's numbers, then what the run's rejections say."""
    if a is None:
        return '<div class="mv-anatomy mv-empty">Appears once a model pair is loaded.</div>'
    names = html.escape(a.target) + (f" + {html.escape(a.drafter)}" if a.drafter else "")
    attrs = (f'data-target-layers="{a.target_layers}" data-target-width="{a.target_width}" '
             f'data-drafter-layers="{a.drafter_layers}" data-drafter-width="{a.drafter_width}" '
             f'data-centroids="{a.clustered.centroids if a.clustered else 0}" data-kind="{a.kind}" '
             f'data-experts="{a.experts.num_experts if a.experts else 0}" '
             f'data-target-precision="{html.escape(a.target_precision)}" '
             f'data-drafter-precision="{html.escape(a.drafter_precision)}"')
    in_t = f" in {html.escape(a.target_precision)}" if a.target_precision else ""
    in_d = f" in {html.escape(a.drafter_precision)}" if a.drafter_precision else ""
    if a.kind != "mtp":
        what = ("an independent draft model" if a.kind == "model" else "no drafter model (prompt lookup)")
        return (f'<div class="mv-anatomy" {attrs}><p><b>{names}</b>: target {a.target_layers} layers × width '
                f'{a.target_width}{in_t}. This pair has {what}, not a Gemma 4 MTP drafter: there is no drafter '
                f'anatomy to draw.</p>{_experts(a)}</div>')
    summary = (f'<p><b>{names}</b>: the target has {a.target_layers} layers of width {a.target_width} '
               f'({a.target_params / 1e6:.1f}M parameters{in_t}); the MTP drafter has {a.drafter_layers} '
               f'layer{"s" if a.drafter_layers != 1 else ""} of width {a.drafter_width} '
               f'({a.drafter_params / 1e6:.2f}M parameters{in_d}). '
               'Each draft reads concat(target embedding of the last '
               f'token, hidden state) = {a.input_width} numbers, projects them to {a.projected_width}, attends to the '
               'target\'s K/V at one constant position (the last verified one), and feeds its own state '
               f'(projected back to {a.state_width}) to the next draft.</p>')
    return f'<div class="mv-anatomy" {attrs}>{summary}{_experts(a)}{_svg(a)}{_rejections(a, events)}</div>'


__all__ = ["anatomy_html"]
