"""Hand-built event streams for the tests: one builder of a speculative step, and the
runs made from it (no torch, no gradio).

Two families share the builders:

* ``spec_run()``/``ar_run()``: a short run with text pieces (whitespace, an ``<eos>``,
  ``EVIL`` markup that must come out escaped) and times, for the views;
* ``spec_stream(plan)``/``ar_run([""] * n, dt)``: runs of a given shape (drafts and
  acceptances per step, measured seconds), for the metrics and the theory checks.
"""
from __future__ import annotations

from mtp_viz.engine.events import Accepted, Bonus, Done, Drafted, Rejected, Start, Step, Token

EVIL = '<img src=x onerror="alert(1)">'


def spec_step(step, drafts, accepted, *, bonus="", bonus_id=7, first_id=100, q=1.0,
              draft_s=0.0, verify_s=0.0, t=0.0, reason="", next_len=0, cut=""):
    """Events of one verification step: the ``drafts`` (their text pieces; token ids from
    ``first_id`` on; the drafter's probability ``q``) drafted, the first ``accepted`` of
    them accepted and the rest rejected; then the target's bonus token (text ``bonus``,
    id ``bonus_id``; None: no bonus, as when a cut drops it) and the closing Step."""
    ids = range(first_id, first_id + len(drafts))
    ev = [Drafted(step=step, index=i, token_id=k, text=d, q=q) for i, (k, d) in enumerate(zip(ids, drafts))]
    ev += [Accepted(step=step, index=i, token_id=k, text=d)
           for i, (k, d) in enumerate(zip(ids, drafts)) if i < accepted]
    ev += [Rejected(step=step, index=i, token_id=k, text=d)
           for i, (k, d) in enumerate(zip(ids, drafts)) if i >= accepted]
    if bonus is not None:
        kind = "extension" if accepted == len(drafts) else "correction"
        ev.append(Bonus(step=step, token_id=bonus_id, text=bonus, index=accepted, kind=kind))
    ev.append(Step(step=step, draft_tokens=len(drafts), accepted=accepted, new_tokens=accepted + (bonus is not None),
                   draft_seconds=draft_s, verify_seconds=verify_s, next_draft_tokens=next_len, reason=reason,
                   cut=cut, t=t))
    return ev


# ---------------------------------------------------------------- runs with text, for the views

def spec_run():
    """Three steps of three, five and four drafts: all accepted then an extension; two
    accepted then a correction (``EVIL``); none accepted then ``<eos>``."""
    view_step = dict(bonus_id=7, first_id=100, q=0.9, draft_s=0.002, verify_s=0.005)
    ev = [Start(mode="speculative", prompt_tokens=5, settings={"draft_tokens": 3, "threads": 1})]
    ev += spec_step(1, ["def", " f", "("], 3, bonus=")", t=0.01, reason="all accepted: +2", next_len=5, **view_step)
    ev += spec_step(2, [":", "\n", "    ", "x", "y"], 2, bonus=EVIL, t=0.02, reason="rejection: -1", next_len=4,
                    **view_step)
    ev += spec_step(3, ["a", "b", "c", "d"], 0, bonus="<eos>", t=0.03, reason="constant", next_len=4, **view_step)
    ev.append(Done(new_tokens=8, target_forwards=3, seconds=0.03, stop_reason="eos"))
    return ev


def ar_run(texts=("def", " f", "(", ")", ":", "\n", EVIL, "<eos>"), dt=0.01):
    """An autoregressive run: one Token and one Step per text piece, ``dt`` seconds each
    (by default the same text as ``spec_run``). ``ar_run([""] * n, dt)``: a run of
    ``n`` forwards of ``dt`` seconds, for the metrics."""
    ev = [Start(mode="autoregressive", prompt_tokens=5)]
    for i, tx in enumerate(texts, 1):
        tid = {"def": 100, " f": 101, "(": 102, ")": 7, ":": 100, "\n": 101}.get(tx, 7)
        ev += [Token(step=i, token_id=tid, text=tx, t=i * dt),
               Step(step=i, draft_tokens=0, accepted=0, new_tokens=1, verify_seconds=dt, t=i * dt)]
    ev.append(Done(new_tokens=len(texts), target_forwards=len(texts), seconds=len(texts) * dt))
    return ev


# ---------------------------------------------------------------- runs of a given shape, for the metrics

def spec_stream(plan, seconds=1.0, prefill_s=0.5):
    """plan: list of (draft_tokens, accepted[, spec_step keywords]) per step. Like the
    engine, step 1 is the prefill: no drafts, the target's first token closes it."""
    shape = dict(first_id=10, bonus_id=99)
    events = [Start("speculative", 5)] + spec_step(1, [], 0, verify_s=prefill_s, **shape)
    total = 1
    for i, (g, a, *kw) in enumerate(plan, start=2):
        ev = spec_step(i, [""] * g, a, **{**shape, **(kw[0] if kw else {})})
        events += ev
        total += ev[-1].new_tokens
    events.append(Done(new_tokens=total, target_forwards=len(plan) + 1, seconds=seconds))
    return events


PLAN = [(4, 4), (4, 2), (4, 0), (4, 3)]   # drafted 16, accepted 9, 3 rejections
