"""Step captions (``#step-caption``): one or two sentences on what the last phase of a
run did, with that step's own numbers. Pure: events in, text or HTML out."""
from __future__ import annotations

import html
from typing import Sequence

from mtp_viz.engine.events import Bonus, Done, Drafted, Event, Rejected, Start, Step, Token

from .tokens import unreported_rejections

_ORDINALS = ("first", "second", "third", "fourth", "fifth", "sixth", "seventh", "eighth")


def ordinal(n: int) -> str:
    """1 -> "first", ..., 9 -> "9th"."""
    return _ORDINALS[n - 1] if 1 <= n <= len(_ORDINALS) else f"{n}th"


def _tokens(n: int) -> str:
    return f"{n} token" + ("" if n == 1 else "s")


def _quoted(text: str) -> str:
    """A token's text as a reader sees it: quoted, whitespace made visible."""
    if text == " ":
        return "a space"
    shown = text.replace("\n", "\u21b5").replace("\t", "\u21e5")
    return f"\u201c{shown}\u201d"


def _ms(seconds: float) -> str:
    ms = seconds * 1000
    return f"{ms:.1f} ms" if ms < 10 else f"{ms:.0f} ms"


def _took(seconds: float, form: str = " ({})") -> str:
    """A phase's time, or nothing where the source reports none (a vLLM server)."""
    return form.format(_ms(seconds)) if seconds > 0 else ""


def caption(events: Sequence[Event]) -> str:
    """What the newest phase of ``events`` (one run, possibly still going) did."""
    if not events:
        return ""
    last = max((i for i, e in enumerate(events) if isinstance(e, Step)), default=-1)
    pending = [e for e in events[last + 1:] if isinstance(e, Drafted)]
    if pending:
        words = ", ".join(_quoted(e.text) for e in pending)
        return (f"Step {pending[0].step}: the drafter proposed {_tokens(len(pending))}: {words}. "
                "Next, the target checks them all in one forward pass.")
    done = next((e for e in reversed(events) if isinstance(e, Done)), None)
    if last < 0:
        return ""
    step = events[last]
    within = [e for e in events[:last] if getattr(e, "step", None) == step.step]
    text = _verdict(step, within, events[0])
    if done is not None:
        text += (f" Done: {_tokens(done.new_tokens)} in {done.target_forwards} target forwards, "
                 f"{done.seconds:.2f} s.")
    return text


def _verdict(step: Step, within: Sequence[Event], start: Event) -> str:
    """The sentence for a finished step (a verification, the prefill, or a plain token)."""
    own = next((e for e in within if isinstance(e, (Bonus, Token))), None)
    word = f" {_quoted(own.text)}" if own is not None and own.text else ""
    if isinstance(own, Token):
        return f"Step {step.step}: the target wrote{word} in one forward pass{_took(step.verify_seconds)}."
    if step.draft_tokens == 0:
        if step.step == 1 and isinstance(start, Start):
            return (f"Step 1: the target read the prompt ({_tokens(start.prompt_tokens)}) in one forward pass"
                    f"{_took(step.verify_seconds)} and wrote its first token{word}.")
        return f"Step {step.step}: no drafts; the target wrote one token of its own{word}."
    k, n = step.draft_tokens, step.accepted
    rejected = [e for e in within if isinstance(e, Rejected)]
    head = (f"Step {step.step}: the drafter proposed {_tokens(k)}{_took(step.draft_seconds, ' in {}')}. "
            f"The target checked them in one forward pass{_took(step.verify_seconds)}: ")
    unreported = unreported_rejections(step, len(rejected))
    if unreported:
        tail = (f"it kept {n} and rejected {unreported} (the server does not say which tokens)"
                + (f", and wrote its own token{word} in their place." if own is not None else "."))
    elif rejected:
        after = len(rejected) - 1
        tail = (f"it kept {n}, rejected the {ordinal(rejected[0].index + 1)}"
                + (f" (the {_tokens(after)} drafted after it went too)" if after > 0 else "")
                + f", and wrote its own token{word} in its place.")
    elif n == k:
        kept = "it kept all of them" if k > 1 else "it kept it"
        tail = f"{kept} and added a token of its own{word}." if own is not None else f"{kept}."
    else:  # every draft agreed, but an end-of-sequence among them ended the step
        tail = f"it kept {n} of them."
    if step.cut == "eos":
        tail += " An end-of-sequence token ended the step early."
    return head + tail


def caption_html(events: Sequence[Event]) -> str:
    """The caption as escaped HTML for ``#step-caption`` (model text is untrusted)."""
    text = caption(events)
    return f'<div class="mv-caption">{html.escape(text)}</div>' if text else ""


__all__ = ["caption", "caption_html", "ordinal"]
