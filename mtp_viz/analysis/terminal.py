"""The terminal view of a run: its text as it streams, each token styled by kind (ANSI
colours when asked), then the run's summary line. What ``mtp-viz generate`` and
``mtp-viz replay`` print, and :func:`mtp_viz.show` outside a notebook. A pure function
of the events and the stream it writes to.
"""
from __future__ import annotations

import sys

from mtp_viz.engine.events import Accepted, Bonus, Done, Rejected, Token

STYLE = {  # ANSI SGR codes; kinds stay distinguishable without color (bold, underline, strike)
    "accepted": "32",            # green
    "correction": "1;4;33",      # bold underlined yellow: the target corrected a draft
    "extension": "1;36",         # bold cyan: the target's extra token after full acceptance
    "token": "0",
    "rejected": "2;9;31",        # dim struck-through red
}


def print_styled(events, color: bool, out=None) -> Done | None:
    out = out or sys.stdout
    def paint(text: str, style: str) -> str:
        return f"\x1b[{STYLE[style]}m{text}\x1b[0m" if color and text else text

    done = None
    for e in events:
        if isinstance(e, Accepted):
            out.write(paint(e.text, "accepted"))
        elif isinstance(e, Rejected) and color:  # without color a struck-through token is unreadable
            out.write(paint(e.text, "rejected"))
        elif isinstance(e, Bonus):
            out.write(paint(e.text, e.kind))
        elif isinstance(e, Token):
            out.write(e.text)
        elif isinstance(e, Done):
            done = e
        out.flush()
    if done is not None:
        out.write("\n" + summary_line(done) + "\n")
    return done


def summary_line(d: Done) -> str:
    parts = [f"{d.new_tokens} new tokens", f"{d.target_forwards} target forwards",
             f"τ {d.tau:.2f} (tokens / verify)"]
    if d.drafted:
        parts.append(f"acceptance {d.acceptance_rate:.0%} ({d.accepted}/{d.drafted})")
    parts.append(f"{d.tokens_per_second:.1f} tokens/s")
    return " · ".join(parts)


__all__ = ["STYLE", "print_styled", "summary_line"]
