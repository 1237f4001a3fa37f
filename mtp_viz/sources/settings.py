"""One run's settings, checked in one place.

:class:`RunSettings` is what every source takes (:mod:`mtp_viz.sources.base`), and
:meth:`RunSettings.validate` is the one place its values are checked, for the Python
API, the CLI, the app's form and ``/generate`` alike (as
:meth:`mtp_viz.engine.decoding.Sampling.validate` is for the sampler's). Each problem is
one sentence naming the setting, whatever the decoding mode: an out-of-range top-p is
refused under greedy decoding too, where it would be silently ignored.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from mtp_viz.engine.decoding import MAX_DRAFT_TOKENS, Sampling
from mtp_viz.engine.drafters import DRAFTERS
from mtp_viz.engine.schedules import SCHEDULES
from mtp_viz.errors import UserError, clip

MODES = ("speculative", "autoregressive")
# MAX_DRAFT_TOKENS (16, the engine's: mtp_viz.engine.decoding) is the longest draft a run
# may ask for (vLLM's limit is similar); importable from here, where the run's settings are checked
MAX_TOP = 50            # most top candidates per position a run may record
QUOTE = 40              # characters of a bad value quoted back in a sentence


def quote(value: Any) -> str:
    """A user's value for an error sentence: its repr, cut to a short prefix."""
    return clip(repr(value), QUOTE)


def _whole(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


DEFAULT_DRAFT_TOKENS = 4      # the draft length the app's slider and the CLI's generate start at
DEFAULT_MAX_NEW_TOKENS = 64   # and the tokens they ask for


@dataclass(frozen=True)
class RunSettings:
    """What one run (or a comparison of modes) asks of a source, as the user chose it."""
    prompt: str | list                      # text, or a chat as a list of {"role", "content"}
    modes: tuple[str, ...] = MODES          # which runs: speculative, and/or the baseline
    drafter: str = "auto"                   # a name in engine.drafters.DRAFTERS, or "auto"
    max_new_tokens: int = DEFAULT_MAX_NEW_TOKENS
    draft_tokens: int | None = None         # the schedule's first length; None: the drafter's own
    schedule: str = "constant"              # a name in engine.schedules.SCHEDULES
    sampling: Sampling = field(default_factory=Sampling)
    chat: bool = True                       # apply the model's chat template when it has one
    top: int = 0                            # top candidates recorded per position (the inspector's)
    stale_kv: bool = False                  # an experiment switch (see engine.loop.speculative)
    max_prompt_tokens: int | None = None    # the deployment's cap (MTP_VIZ_MAX_PROMPT_TOKENS)
    experts: bool = False                   # count each step's experts (mixture-of-experts targets)
    _checked: bool = field(default=False, init=False, repr=False, compare=False)  # validate() passed

    @property
    def greedy(self) -> bool:
        return self.sampling.greedy

    @property
    def baseline(self) -> bool:
        return "autoregressive" in self.modes

    def only(self, *modes: str) -> "RunSettings":
        """The same settings for these modes."""
        return dataclasses.replace(self, modes=tuple(modes))

    def validate(self, max_new_tokens: int | None = None) -> "RunSettings":
        """These settings, or a UserError of one sentence for the first bad value;
        ``max_new_tokens`` is a deployment's cap on the setting of that name. Checked once:
        the boundary (a front end, with its cap) checks, and a source handed the same
        settings finds them checked (they are frozen, so they cannot have changed)."""
        if self._checked and (max_new_tokens is None or self.max_new_tokens <= max_new_tokens):
            return self
        self._check(max_new_tokens)
        object.__setattr__(self, "_checked", True)
        return self

    def _check(self, max_new_tokens: int | None) -> None:
        _check_prompt(self.prompt)
        bad = [m for m in self.modes if m not in MODES] or ([] if self.modes else [""])
        if bad:  # quote the bad mode, not the tuple the settings hold
            raise UserError(f"Unknown mode {quote(bad[0])}; choose speculative or autoregressive.")
        if self.drafter != "auto":
            check_drafter(self.drafter)
        if self.schedule not in SCHEDULES:
            raise UserError(f"Unknown schedule {quote(self.schedule)}; choose one of {', '.join(SCHEDULES)}.")
        cap = max_new_tokens
        if not _whole(self.max_new_tokens) or self.max_new_tokens < 1 or (cap and self.max_new_tokens > cap):
            raise UserError(f"Max new tokens must be between 1 and {cap}." if cap else
                            "Max new tokens must be a whole number of at least 1.")
        if self.draft_tokens is not None and not (
                _whole(self.draft_tokens) and 1 <= self.draft_tokens <= MAX_DRAFT_TOKENS):
            raise UserError(f"Draft tokens must be a whole number between 1 and {MAX_DRAFT_TOKENS}.")
        if not _whole(self.top) or not 0 <= self.top <= MAX_TOP:
            raise UserError(f"Top candidates must be a whole number between 0 and {MAX_TOP}.")
        if not isinstance(self.chat, bool):
            raise UserError("Chat must be true or false.")
        if not isinstance(self.experts, bool):
            raise UserError("Count experts must be true or false.")
        try:
            self.sampling.validate()
        except ValueError as e:
            raise UserError(str(e)) from None

    def as_dict(self) -> dict[str, Any]:
        """Plain values (for a trace's header or a record)."""
        return {**dataclasses.asdict(self), "sampling": self.sampling.as_dict()}


def check_drafter(name: Any) -> None:
    """A drafter's name in engine.drafters.DRAFTERS, or the sentence that says it is not."""
    if name not in DRAFTERS:
        raise UserError(f"Unknown drafter {quote(name)}; choose auto, {', '.join(DRAFTERS)}.")


def _check_prompt(prompt: Any) -> None:
    """A non-empty text (valid UTF-8), or a chat of {"role", "content"} messages."""
    if isinstance(prompt, list):
        if not prompt or not all(isinstance(m, dict) and isinstance(m.get("role"), str)
                                 and isinstance(m.get("content"), str) for m in prompt):
            raise UserError("A chat prompt must be a list of messages, each with a role and a content text.")
        texts = [m["content"] for m in prompt]
    elif isinstance(prompt, str):
        texts = [prompt]
    else:
        raise UserError("The prompt must be text.")
    if not any(t.strip() for t in texts):
        raise UserError("The prompt is empty.")
    for t in texts:
        try:
            t.encode("utf-8")
        except UnicodeEncodeError:  # lone surrogates, e.g. undecodable bytes from a shell
            raise UserError("The prompt is not valid UTF-8 text.") from None


__all__ = ["MAX_DRAFT_TOKENS", "MAX_TOP", "MODES", "RunSettings", "check_drafter", "quote"]
