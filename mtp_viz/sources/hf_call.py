"""One recorded ``generate(assistant_model=...)`` call: the hooks' side of
:mod:`.hf_generate` (how it listens and what the events carry are said there), turning
each step's drafts, the target's logits and the streamer's tokens into events."""
from __future__ import annotations

import functools
import time
from typing import Any, Callable

from mtp_viz.engine.events import Done, Drafted, Error, Event, Start, Step, verdicts
from mtp_viz.engine.text import TAIL

CHECKED_WITH = "5.24.0"    # the transformers version whose _assisted_decoding these hooks were read from
# the candidate generator's class -> what Start.settings["drafter"] calls it (as the engine's drafters do)
GENERATOR_DRAFTERS = {"SinglePositionMultiTokenCandidateGenerator": "mtp", "AssistedCandidateGenerator": "model",
            "PromptLookupCandidateGenerator": "lookup"}
MISSING = object()


def transformers_version() -> str:
    import transformers
    return transformers.__version__


class Streamer:
    """generate's streamer: records each put, then hands it to the reader's streamer."""

    def __init__(self, call: "Call", inner):
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
    def guarded(self: "Call", *args, **kwargs):
        if self.broken:
            return None
        try:
            return fn(self, *args, **kwargs)
        except Exception as err:  # noqa: BLE001 - reported in the stream instead
            self.fail(f"The recorder lost track of transformers' generate ({type(err).__name__}: {err}); "
                      f"transformers {transformers_version()} may call its hooks differently from {CHECKED_WITH}.")
            return None
    return guarded


class Call:
    """One recorded generate call: the state between the hooks, and its events."""

    def __init__(self, rec: Any, tokenizer=None):
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
            self.restore.append((generator, name, generator.__dict__.get(name, MISSING)))
            setattr(generator, name, wrap(getattr(generator, name)))

    def close(self) -> None:
        """After the call, also when it raised: the hooks on the generator and the
        assistant go."""
        for obj, name, old in reversed(self.restore):
            if old is MISSING:
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
        only when known), bonus (the target's own token, unless a cut dropped it):
        :func:`mtp_viz.engine.events.verdicts`."""
        tail = self.ids[-TAIL:]   # a piece reads the context's last TAIL tokens only
        self.events.extend(verdicts(self.step, drafts, kept, new[kept] if len(new) > kept else None,
                                    text=lambda i, tok: self._piece(tail + drafts[:i], tok), p=p, p_bonus=p[-1],
                                    q=q, rejected=range(agreed, len(drafts) if rejected else agreed)))

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
                      f"{transformers_version()} may call its hooks differently from {CHECKED_WITH}.")
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
         "drafter": GENERATOR_DRAFTERS.get(name, name), "schedule": schedule or "constant",
         "num_assistant_tokens": draft_tokens, "do_sample": sampled, "max_new_tokens": max_new,
         "temperature": float(config.temperature or 1.0) if sampled else 0.0,
         "top_k": int(config.top_k or 0) if sampled else 0,
         "top_p": float(config.top_p if config.top_p is not None else 1.0) if sampled else 1.0,
         "seed": None, "clock": "wall"}
    if 0 <= draft_tokens <= 256:
        s["draft_tokens"] = draft_tokens
    return s


__all__ = ["CHECKED_WITH", "GENERATOR_DRAFTERS", "MISSING", "Call", "Streamer", "settings", "transformers_version"]
