"""transformers' own ``generate(assistant_model=...)``, recorded as mtp-viz events.

    with mtp_viz.record(target, tokenizer=tok) as rec:
        out = target.generate(**inputs, assistant_model=assistant, max_new_tokens=64, do_sample=False)
    rec.events    # start, drafted, accepted, rejected, bonus, step, ..., done (docs/events.md)
    rec.source    # the same run as a Source (a TraceSource): the app, the CLI, trace files
    mtp_viz.show(rec)  # drawn inline in a notebook (mtp_viz.notebook), else in the terminal
    rec.save("run.jsonl")  # a trace file: the app's upload and mtp-viz replay play it

The call itself is the reader's, unchanged, and so is its output. Inside the ``with``
block every ``generate`` call on ``target`` that is given an ``assistant_model`` (and
decodes with one beam, as assisted decoding does) is recorded; other calls run untouched
and record nothing. On exit, also when ``generate`` raised, every attribute the recorder
set is removed again.

How it listens:

- Public: the ``streamer=`` of ``generate``. The recorder passes its own streamer, which
  forwards every ``put`` and ``end`` to the reader's streamer when one was given; it sees
  each step's valid tokens (``streamer.put(valid_tokens)`` in ``_assisted_decoding``).
  The time the reader's streamer takes is kept off the recorded times (it is a view).
- Private, pinned to transformers :data:`CHECKED_WITH` (5.24.0), where the streamer
  cannot tell: the model's ``_get_candidate_generator`` (wrapped on the instance, to
  find the call's candidate generator), and on that generator ``get_candidates`` (the
  drafts and the drafter's logits) and ``update_candidate_strategy(input_ids, scores,
  num_matches)`` (the target's processed logits of the step, and the schedule's next
  length). ``_assisted_decoding`` calls them in this order once per step: get_candidates,
  the target forward, the accept rule, ``streamer.put``, update_candidate_strategy. A
  version without these names fails with one sentence (:class:`UserError`); a version
  that calls them differently is caught by the recorder's own checks (the tokens the
  streamer saw against ``input_ids``, the recorded tokens against the output), which end
  the recording with an ``error`` event rather than a wrong run. The recorder never
  raises inside the reader's call for a check of its own.

What the events carry:

- ``p`` (on accepted, rejected, bonus): the target's probability of the token under the
  logits transformers decided with (its logits processors applied: temperature, top-k,
  top-p when sampling; none by default when greedy, which is then the softmax of the raw
  logits, as in the engine).
- ``q`` (on drafted, accepted, rejected): the drafter's probability of the token as
  transformers' accept rule sees it, the softmax of the candidate logits its generator
  returned. For the MTP generator (``SinglePositionMultiTokenCandidateGenerator``) these
  are the assistant's raw logits and the draft is their argmax even when sampling; its
  ``do_sample=True`` accept rule still scores the draft with this q, which is why it does
  not preserve the target's distribution (the engine samples drafts from q instead). A generator without logits (prompt
  lookup) leaves q at 1, a certain draft.
- ``agreed``: transformers cuts a step at an end-of-sequence token among the drafts and
  does not say how many later drafts the target agreed with. Greedy, the recorder
  recomputes it from the logits; sampling, it cannot (the accept rule drew random numbers),
  so a cut step under sampling records ``agreed`` = ``accepted`` and no ``rejected``
  events after the end-of-sequence token.
- Times (``seconds``, ``t``, ``draft_seconds``, ``verify_seconds``) are wall time from
  the moment ``generate`` builds its candidate generator; ``draft_seconds`` is the time
  in ``get_candidates``, ``verify_seconds`` the time from there to the step's
  ``streamer.put`` (the target forward and the accept rule).
- No top candidates, no ``seed`` (transformers draws from torch's global generator).
"""
from __future__ import annotations

import functools
import inspect
import threading
from typing import Any, Callable

from mtp_viz.engine.events import Event
from mtp_viz.errors import UserError

from .hf_call import CHECKED_WITH, MISSING, Call, Streamer, transformers_version

MODEL_HOOKS = ("generate", "_get_candidate_generator", "_assisted_decoding")
GENERATOR_HOOKS = ("get_candidates", "update_candidate_strategy")
_MARK = "__mtp_viz_recording__"   # set on the recorder's own wrappers, so a second record() sees the first


def record(model, tokenizer=None) -> "Recording":
    """A context manager that records ``model.generate(..., assistant_model=...)`` calls
    made inside it (see the module docstring); ``tokenizer`` fills the events' text.
    ``model`` is the target, whose ``generate`` is called: anything else is one sentence."""
    config = getattr(model, "config", None)
    if config is None or not callable(getattr(model, "generate", None)):
        raise UserError(f"record() needs the target model whose generate you call (record(target_model)), "
                        f"not {type(model).__name__}.")
    from .pair import ASSISTANT_TYPES
    if getattr(config, "model_type", "") in ASSISTANT_TYPES:
        raise UserError("record() wraps the target model, whose generate you call with assistant_model=...; "
                        "this is the assistant: record(target_model), then "
                        "target_model.generate(..., assistant_model=assistant_model).")
    return Recording(model, tokenizer)


def _hook_missing(where: str, name: str) -> UserError:
    return UserError(f"mtp-viz records transformers' generate through {where}.{name}, which this "
                     f"transformers ({transformers_version()}) lacks; the recorder was checked against transformers "
                     f"{CHECKED_WITH}.")


def check_model_hooks(model) -> None:
    """One sentence when ``model``'s class lacks a hook the recorder needs."""
    for name in MODEL_HOOKS:
        if not callable(getattr(type(model), name, None)):
            raise _hook_missing(type(model).__name__, name)


def check_generator_hooks(generator) -> None:
    for name in GENERATOR_HOOKS:
        if not callable(getattr(generator, name, None)):
            raise _hook_missing(type(generator).__name__, name)


class Recording:
    """What :func:`record` gives: ``events`` (the latest recorded call's, growing while
    it runs), ``calls`` (every recorded call's events, in order) and ``source``."""

    def __init__(self, model, tokenizer=None):
        self.model = model
        self.tokenizer = tokenizer
        self.calls: list[list[Event]] = []
        self._saved: dict[str, Any] = {}
        self._local = threading.local()   # the call in progress on each thread
        self._entered = False
        self._found: Any = None             # the tokenizer found where the model came from (False: none)

    @property
    def events(self) -> list[Event]:
        return self.calls[-1] if self.calls else []

    @property
    def source(self):
        """The latest recorded call as a :class:`~mtp_viz.sources.recorded.TraceSource`
        (mode "speculative")."""
        from .recorded import TraceSource
        if not self.calls:
            raise UserError("Nothing was recorded: call generate with an assistant_model inside record().")
        return TraceSource(self.events)

    def save(self, path) -> Any:
        """The latest recorded call as a trace file, which the app's trace upload and
        ``mtp-viz replay`` play; returns its path."""
        from . import trace
        return trace.write(path, self.source.recorded["speculative"])

    def _text_tokenizer(self, given=None):
        """What fills the events' text: the tokenizer given to :func:`record`, else the
        one given to generate, else the one saved where the model was loaded from (found
        locally only; none means token ids without text)."""
        if self.tokenizer is not None or given is not None:
            return self.tokenizer if self.tokenizer is not None else given
        if self._found is None:
            self._found = False
            name = getattr(getattr(self.model, "config", None), "_name_or_path", "")
            if name:
                from transformers import AutoTokenizer
                try:
                    self._found = AutoTokenizer.from_pretrained(name, local_files_only=True, trust_remote_code=False)
                except Exception:  # noqa: BLE001 - no tokenizer saved there: the events carry ids only
                    self._found = False
        return self._found or None

    # -- installing and restoring ----------------------------------------------------
    def __enter__(self) -> "Recording":
        if self._entered:
            raise UserError("A recording can be entered once; call record() again for another.")
        check_model_hooks(self.model)
        if getattr(self.model.__dict__.get("generate"), _MARK, False):
            raise UserError("This model is already being recorded; end the other record() first.")
        self._entered = True
        self._install("generate", self._wrap_generate(self.model.generate))
        self._install("_get_candidate_generator", self._wrap_factory(self.model._get_candidate_generator))
        return self

    def __exit__(self, *exc) -> bool:
        for name, old in reversed(list(self._saved.items())):
            if old is MISSING:
                self.model.__dict__.pop(name, None)
            else:
                object.__setattr__(self.model, name, old)
        self._saved.clear()
        return False

    def _install(self, name: str, fn: Callable) -> None:
        self._saved[name] = self.model.__dict__.get(name, MISSING)
        setattr(fn, _MARK, True)
        object.__setattr__(self.model, name, fn)  # an instance attribute, shadowing the class's

    # -- the hooks -------------------------------------------------------------------
    def _wrap_generate(self, original: Callable) -> Callable:
        @functools.wraps(original)
        def generate(*args, **kwargs):
            if not self._records(args, kwargs):
                return original(*args, **kwargs)
            call = Call(self, self._text_tokenizer(kwargs.get("tokenizer")))
            kwargs["streamer"] = Streamer(call, kwargs.get("streamer"))
            self._local.call = call
            try:
                out = original(*args, **kwargs)
            except BaseException as err:
                call.failed(err)
                raise
            finally:
                self._local.call = None
                call.close()
            call.finished(getattr(out, "sequences", out))
            return out
        return generate

    def _records(self, args: tuple, kwargs: dict) -> bool:
        """Whether this call decodes assisted, given an assistant_model: the only calls
        the recorder's streamer is added to (beam search, for one, refuses a streamer)."""
        if len(args) > 1 or kwargs.get("assistant_model") is None or kwargs.get("custom_generate"):
            return False  # generate's parameters after `inputs` are taken by name here
        if kwargs.get("cache_implementation") == "paged":
            return False  # continuous batching, which takes no assistant
        config = kwargs.get("generation_config") or getattr(self.model, "generation_config", None)
        beams = kwargs.get("num_beams", getattr(config, "num_beams", 1))
        return (beams or 1) == 1

    def _wrap_factory(self, original: Callable) -> Callable:
        signature = inspect.signature(original)

        @functools.wraps(original)
        def factory(*args, **kwargs):
            generator = original(*args, **kwargs)
            call = getattr(self._local, "call", None)
            if call is not None and call.generator is None:
                check_generator_hooks(generator)
                bound = signature.bind_partial(*args, **kwargs).arguments
                call.begin(generator, bound.get("generation_config"), bound.get("input_ids"),
                           bound.get("assistant_model"))
            return generator
        return factory


__all__ = ["CHECKED_WITH", "Recording", "record", "check_model_hooks", "check_generator_hooks"]
