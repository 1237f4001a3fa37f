"""The app's form as its handlers read it (``values`` by form name) and the status lines a
handler's frames carry: one builder for the app tests (several older ones keep copies)."""
from __future__ import annotations


def values(**kw) -> dict:
    """A Run's or a Measure's form values: greedy, the bundled pair's picker entry, ``kw`` over them."""
    v = dict(prompt="hi", model="tiny", custom_target="", custom_drafter="", max_new_tokens=8,
             draft_tokens=3, schedule="constant", drafter_kind="mtp", decoding="greedy",
             temperature=0.8, top_p=0.95, top_k=0, seed=0, chat=False, baseline=True)
    return {**v, **kw}


def statuses(frames) -> list[str]:
    """``#status`` of each frame that set it (the app's handlers' output tuples)."""
    from mtp_viz.app.handlers import local
    i = local.OUTPUTS.index("status")
    return [f[i] for f in frames if isinstance(f[i], str)]
