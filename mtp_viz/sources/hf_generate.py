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
import time
from typing import Any, Callable

from mtp_viz.engine.events import Accepted, Bonus, Done, Drafted, Error, Event, Rejected, Start, Step
from mtp_viz.errors import UserError

CHECKED_WITH = "5.24.0"    # the transformers version whose _assisted_decoding these hooks were read from
MODEL_HOOKS = ("generate", "_get_candidate_generator", "_assisted_decoding")
GENERATOR_HOOKS = ("get_candidates", "update_candidate_strategy")
# the candidate generator's class -> what Start.settings["drafter"] calls it (as the engine's drafters do)
DRAFTERS = {"SinglePositionMultiTokenCandidateGenerator": "mtp", "AssistedCandidateGenerator": "model",
            "PromptLookupCandidateGenerator": "lookup"}
_MISSING = object()
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


def _version() -> str:
    import transformers
    return transformers.__version__


def _hook_missing(where: str, name: str) -> UserError:
    return UserError(f"mtp-viz records transformers' generate through {where}.{name}, which this "
                     f"transformers ({_version()}) lacks; the recorder was checked against transformers "
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
            if old is _MISSING:
                self.model.__dict__.pop(name, None)
            else:
                object.__setattr__(self.model, name, old)
        self._saved.clear()
        return False

    def _install(self, name: str, fn: Callable) -> None:
        self._saved[name] = self.model.__dict__.get(name, _MISSING)
        setattr(fn, _MARK, True)
        object.__setattr__(self.model, name, fn)  # an instance attribute, shadowing the class's

    # -- the hooks -------------------------------------------------------------------
    def _wrap_generate(self, original: Callable) -> Callable:
        @functools.wraps(original)
        def generate(*args, **kwargs):
            if not self._records(args, kwargs):
                return original(*args, **kwargs)
            call = _Call(self, self._text_tokenizer(kwargs.get("tokenizer")))
            kwargs["streamer"] = _Streamer(call, kwargs.get("streamer"))
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


class _Streamer:
    """generate's streamer: records each put, then hands it to the reader's streamer."""

    def __init__(self, call: "_Call", inner):
        self.call, self.inner = call, inner

    def put(self, value) -> None:
        self.call.put(value)
        if self.inner is not None:
            self.call.timed_view(self.inner.put, value)

    def end(self) -> None:
        self.call.ended()
        if self.inner is not None:
            self.call.timed_view(self.inner.end)


def _guarded(fn: Callable) -> Callable:
    """A recorder step that never breaks the reader's call: a failure of its own ends
    the recording with an error event, and generate goes on unrecorded."""
    @functools.wraps(fn)
    def guarded(self: "_Call", *args, **kwargs):
        if self.broken:
            return None
        try:
            return fn(self, *args, **kwargs)
        except Exception as err:  # noqa: BLE001 - reported in the stream instead
            self.fail(f"The recorder lost track of transformers' generate ({type(err).__name__}: {err}); "
                      f"transformers {_version()} may call its hooks differently from {CHECKED_WITH}.")
            return None
    return guarded


class _Call:
    """One recorded generate call: the state between the hooks, and its events."""

    def __init__(self, rec: Recording, tokenizer=None):
        from mtp_viz.engine.text import Detokenizer
        self.rec = rec
        self.detok = Detokenizer(tokenizer) if tokenizer is not None else None
        self.generator = None              # set when generate builds its candidate generator
        self.events: list[Event] = []
        self.broken = False
        self.view_seconds = 0.0            # time in the reader's streamer, kept off the clock
        self.t0 = self.t_end = 0.0
        self.pending: tuple | None = None  # (drafts, q, draft seconds, verify start or seconds)
        self.valid: list[int] | None = None
        self.restore: list[tuple[Any, str, Any]] = []
        self.hook = None

    # -- the call's clock: wall time without the reader's streamer -------------------
    def clock(self) -> float:
        return time.perf_counter() - self.view_seconds

    def timed_view(self, fn: Callable, *args) -> None:
        t = time.perf_counter()
        try:
            fn(*args)
        finally:
            self.view_seconds += time.perf_counter() - t

    def fail(self, message: str) -> None:
        if not self.broken:
            self.broken = True
            self.events.append(Error(message))

    # -- begin: the candidate generator exists, decoding is about to start -----------
    @_guarded
    def begin(self, generator, config, input_ids, assistant) -> None:
        import transformers
        self.generator = generator
        self.rec.calls.append(self.events)
        self.prompt = input_ids[0].tolist()
        self.ids = list(self.prompt)
        self.max_length = int(config.max_length)
        eos = config.eos_token_id
        self.eos = set([eos] if isinstance(eos, int) else (eos or []))
        self.greedy = not config.do_sample and getattr(config, "assistant_ensemble_weight", None) is None
        self.step = self.drafted = self.accepted = self.assistant_forwards = 0
        self.last_len = self._draft_setting()
        self._hook_generator(generator)
        if assistant is not None and assistant is not self.rec.model:
            self.hook = assistant.register_forward_pre_hook(self._count_forward)
        schedule = getattr(getattr(generator, "assistant_generation_config", None) or
                           getattr(assistant, "generation_config", None), "num_assistant_tokens_schedule", "")
        self.events.append(Start("speculative", len(self.prompt), tuple(self.prompt),
                                 settings(transformers.__version__, generator, config, schedule, self.last_len,
                                          self.max_length - len(self.prompt))))
        self.t0 = self.clock()

    def _count_forward(self, *_) -> None:
        self.assistant_forwards += 1

    def _hook_generator(self, generator) -> None:
        for name, wrap in (("get_candidates", self._wrap_candidates),
                           ("update_candidate_strategy", self._wrap_update)):
            self.restore.append((generator, name, generator.__dict__.get(name, _MISSING)))
            setattr(generator, name, wrap(getattr(generator, name)))

    def close(self) -> None:
        """After the call, also when it raised: the hooks on the generator and the
        assistant go."""
        for obj, name, old in reversed(self.restore):
            if old is _MISSING:
                obj.__dict__.pop(name, None)
            else:
                setattr(obj, name, old)
        self.restore.clear()
        if self.hook is not None:
            self.hook.remove()
            self.hook = None

    def _draft_setting(self) -> int:
        n = getattr(self.generator, "num_assistant_tokens", None)
        return int(n) if n is not None else 0

    # -- one step: candidates, the streamer's put, update_candidate_strategy ---------
    def _wrap_candidates(self, original: Callable) -> Callable:
        @functools.wraps(original)
        def get_candidates(*args, **kwargs):
            t = self.clock()
            out = original(*args, **kwargs)
            self.candidates(args[0] if args else kwargs["input_ids"], out, self.clock() - t)
            return out
        return get_candidates

    def _wrap_update(self, original: Callable) -> Callable:
        @functools.wraps(original)
        def update_candidate_strategy(input_ids, scores, num_matches, *args, **kwargs):
            result = original(input_ids, scores, num_matches, *args, **kwargs)
            self.verified(input_ids, scores)
            return result
        return update_candidate_strategy

    @_guarded
    def candidates(self, input_ids, out, seconds: float) -> None:
        import torch

        from mtp_viz.engine.sampling import softmax_at  # imports torch: only once recording
        candidate_ids, logits = out
        cur = input_ids.shape[1]
        assert cur == len(self.ids) and self.pending is None, "get_candidates out of the recorded order"
        drafts = candidate_ids[0, cur:].tolist()
        q = [1.0] * len(drafts)
        if logits is not None and drafts:
            with torch.no_grad():
                q = softmax_at(logits[0, :len(drafts)], list(range(len(drafts))), drafts)
        self.step += 1
        self.pending = (drafts, q, seconds, self.clock())
        for i, tok in enumerate(drafts):
            self.events.append(Drafted(self.step, i, tok, self._piece(self.ids + drafts[:i], tok), q[i]))

    @_guarded
    def put(self, value) -> None:
        if self.generator is None:
            return  # the prompt, put by generate before decoding starts
        assert self.pending is not None and self.valid is None, "streamer.put out of the recorded order"
        self.valid = value.reshape(-1).tolist()
        drafts, q, draft_s, t = self.pending
        self.pending = (drafts, q, draft_s, self.clock() - t)

    @_guarded
    def verified(self, input_ids, scores) -> None:
        assert self.pending is not None and self.valid, "update_candidate_strategy out of the recorded order"
        (drafts, q, draft_s, verify_s), new = self.pending, self.valid
        self.pending = self.valid = None
        assert input_ids[0].tolist() == self.ids + new, "the streamer's tokens are not generate's"
        kept = _common_prefix(new, drafts)
        # Every token the step kept a draft: an end-of-sequence token among them cut it.
        # (A correction never equals the draft it replaces, greedy or sampled.)
        cut = ("eos" if new[-1] in self.eos else "max_new_tokens") if kept == len(new) else ""
        agreed = kept
        if cut and self.greedy:  # how many drafts the target agreed with before the cut
            agreed = _common_prefix(scores[0, :len(drafts)].argmax(-1).tolist(), drafts)
        p = _probs(scores, drafts, kept, new)
        self._verdict(drafts, q, p, kept, agreed, new, rejected=not cut or self.greedy)
        self.ids.extend(new)
        self.drafted += len(drafts)
        self.accepted += kept
        nxt = self._draft_setting()
        reason = (f"num_assistant_tokens {nxt - self.last_len:+d}" if nxt != self.last_len
                  else "num_assistant_tokens unchanged")
        self.last_len = nxt
        room = max(self.max_length - len(self.ids) - 1, 0)   # what get_candidates caps the next draft at
        self.events.append(Step(self.step, len(drafts), kept, len(new), draft_s, verify_s, min(nxt, room),
                                reason, cut, self.clock() - self.t0, agreed=agreed))

    def _verdict(self, drafts, q, p, kept, agreed, new, rejected: bool) -> None:
        """accepted (kept drafts), rejected (from the first disagreement on; after a cut
        only when known), bonus (the target's own token, unless a cut dropped it)."""
        ctx = list(self.ids)
        for i in range(kept):
            self.events.append(Accepted(self.step, i, drafts[i], self._piece(ctx, drafts[i]), p[i], q[i]))
            ctx.append(drafts[i])
        for i in range(agreed, len(drafts) if rejected else agreed):
            self.events.append(Rejected(self.step, i, drafts[i], self._piece(self.ids + drafts[:i], drafts[i]),
                                        p[i], q[i]))
        if len(new) > kept:
            kind = "correction" if kept < len(drafts) else "extension"
            self.events.append(Bonus(self.step, new[kept], self._piece(ctx, new[kept]), p[-1], kept, kind))

    def _piece(self, ctx, tok) -> str:
        return self.detok.piece(ctx, tok) if self.detok else ""

    # -- the end ----------------------------------------------------------------------
    def ended(self) -> None:
        self.t_end = self.clock()

    def failed(self, err: BaseException) -> None:
        if self.generator is not None:
            self.fail(f"transformers' generate raised {type(err).__name__}; the recording ends here.")

    @_guarded
    def finished(self, sequences) -> None:
        if self.generator is None:
            return  # generate never decoded assisted: nothing was recorded
        if sequences[0].tolist() != self.ids or self.pending is not None:
            self.fail("The recorded tokens differ from generate's output; transformers "
                      f"{_version()} may call its hooks differently from {CHECKED_WITH}.")
            return
        gen = self.ids[len(self.prompt):]
        seconds = (self.t_end or self.clock()) - self.t0
        stop = ("eos" if gen and gen[-1] in self.eos else
                "max_new_tokens" if len(self.ids) >= self.max_length else "stopped")
        self.events.append(Done.of(
            gen, self.step, seconds, text=self.detok.decode(gen) if self.detok else "",
            drafter_forwards=self.assistant_forwards, drafted=self.drafted, accepted=self.accepted, stop_reason=stop))


def _common_prefix(a: list[int], b: list[int]) -> int:
    n = 0
    while n < len(a) and n < len(b) and a[n] == b[n]:
        n += 1
    return n


def _probs(scores, drafts: list[int], kept: int, new: list[int]) -> list[float]:
    """The target's probability of each draft at its position, then of the bonus (if
    any) at position ``kept``, from the logits transformers decided with."""
    import torch

    from mtp_viz.engine.sampling import softmax_at  # imports torch: only once recording
    rows = list(range(len(drafts))) + ([kept] if len(new) > kept else [])
    cols = drafts + ([new[kept]] if len(new) > kept else [])
    if not rows:
        return []
    with torch.no_grad():
        return softmax_at(scores[0], rows, cols)


def settings(version: str, generator, config, schedule: str, draft_tokens: int, max_new: int) -> dict:
    """Start.settings of a recorded call: where it came from, and the sampling it used
    in the engine's terms (temperature 0 for greedy)."""
    name = type(generator).__name__
    sampled = bool(config.do_sample)
    s = {"source": "transformers generate", "transformers": version, "candidate_generator": name,
         "drafter": DRAFTERS.get(name, name), "schedule": schedule or "constant",
         "num_assistant_tokens": draft_tokens, "do_sample": sampled, "max_new_tokens": max_new,
         "temperature": float(config.temperature or 1.0) if sampled else 0.0,
         "top_k": int(config.top_k or 0) if sampled else 0,
         "top_p": float(config.top_p if config.top_p is not None else 1.0) if sampled else 1.0,
         "seed": None, "clock": "wall"}
    if 0 <= draft_tokens <= 256:
        s["draft_tokens"] = draft_tokens
    return s


__all__ = ["CHECKED_WITH", "Recording", "record", "check_model_hooks", "check_generator_hooks"]
