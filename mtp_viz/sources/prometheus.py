"""A server's speculative decoding counters, from its Prometheus ``/metrics`` text.

Pure functions: text in, numbers out (fetching the text is each server's client's job:
:func:`mtp_viz.sources.vllm.client.scrape`, :func:`mtp_viz.sources.llamacpp.client.scrape`).
vLLM and llama.cpp export the same four families under their own prefix (a
:class:`Family`: ``vllm:`` per engine and model, ``llamacpp:`` per server), counted since
the server started (``_total`` counters)::

    vllm:spec_decode_num_drafts_total                  verify steps that carried drafts
    vllm:spec_decode_num_draft_tokens_total            tokens drafted
    vllm:spec_decode_num_accepted_tokens_total         drafts accepted
    vllm:spec_decode_num_accepted_tokens_per_pos_total{position="k"}
                                                       steps whose draft k was accepted

Acceptance at position k can only happen when drafts 0..k-1 were accepted too, so
``per_pos[k] / drafts`` is the share of steps that kept at least k+1 drafts (the
*unconditional* acceptance of a draft-k slot) and ``per_pos[k] / per_pos[k-1]`` is the
*conditional* one, P(draft k accepted | drafts 0..k-1 accepted), the same two figures
:mod:`mtp_viz.analysis.metrics` computes from events. The mean acceptance length (bonus token
included) is ``τ = 1 + accepted / drafts``. A server started without speculation exports
none of these families.

A page may come from any server a visitor names, so :func:`spec_decode` trusts none of
its numbers: a draft position past :data:`MAX_POSITIONS` or a counter that is not a
finite number from 0 to :data:`MAX_COUNTER` is one :class:`UserError` sentence that
quotes nothing of the page.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass

from mtp_viz.errors import UserError, clip

__all__ = ["Family", "Sample", "SpecDecodeCounters", "VLLM", "parse", "spec_decode", "delta", "MAX_POSITIONS",
           "MAX_COUNTER", "MAX_LABEL_CHARS", "MAX_LABELS", "MAX_SAMPLES", "MAX_MODELS"]


@dataclass(frozen=True)
class Family:
    """Where a server kind keeps its counters: the spec-decode families' prefix, and the
    counter of every token it generated."""
    prefix: str
    generated: str


VLLM = Family("vllm:spec_decode_num_", "vllm:generation_tokens_total")
# The app drafts at most 16 tokens and no real server drafts more; the per-position
# tuple is built densely up to the largest position, so it must be bounded.
MAX_POSITIONS = 16
# ~30 years of tokens at a million a second, and below 2**53 (floats count exactly).
MAX_COUNTER = 1e15
# What one page may make the parser hold (a real vLLM page: ~1,000 samples, a few labels
# each, none longer than a model's path): a label value is kept to its first 1,024
# characters; a sample with more than 64 labels, or a page with more than 100,000 samples,
# is not a page mtp-viz reads; at most 16 model names are kept (and how many there were).
MAX_LABEL_CHARS = 1024
MAX_LABELS = 64
MAX_SAMPLES = 100_000
MAX_MODELS = 16
_NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")
_LABEL_NAME = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*")
_SPACE = re.compile(r"[ \t]*")
_QUOTE_OR_ESCAPE = re.compile(r'["\\]')
_UNESCAPE = {"\\": "\\", '"': '"', "n": "\n"}


@dataclass(frozen=True, slots=True)
class Sample:
    name: str
    labels: tuple[tuple[str, str], ...]
    value: float

    def label(self, key: str, default: str = "") -> str:
        return next((v for k, v in self.labels if k == key), default)


def _value(line: str, pos: int) -> tuple[str, int]:
    """A quoted label value from just after its opening quote: (its text, unescaped and
    kept to :data:`MAX_LABEL_CHARS`, the position after its closing quote). One pass, no
    backtracking: each step jumps to the next quote or backslash."""
    parts, kept = [], 0
    while True:
        m = _QUOTE_OR_ESCAPE.search(line, pos)
        if m is None:
            raise ValueError("a label value that does not end")
        at = m.start()
        if kept < MAX_LABEL_CHARS:
            piece = line[pos:min(at, pos + MAX_LABEL_CHARS - kept)]
            parts.append(piece)
            kept += len(piece)
        if line[at] == '"':
            return "".join(parts)[:MAX_LABEL_CHARS], at + 1
        escaped = line[at + 1:at + 2]
        if kept < MAX_LABEL_CHARS:
            parts.append(_UNESCAPE.get(escaped, "\\" + escaped))
            kept += 1
        pos = at + 2


def _labels(line: str, pos: int, keep: dict[str, str]) -> tuple[tuple[tuple[str, str], ...], int]:
    """The label set from just after its ``{``: (the labels, the position after its ``}``)."""
    out = []
    while True:
        pos = _SPACE.match(line, pos).end()
        if line.startswith("}", pos):
            return tuple(out), pos + 1
        m = _LABEL_NAME.match(line, pos)
        if m is None or m.end() - pos > MAX_LABEL_CHARS or len(out) == MAX_LABELS:
            raise ValueError("not a label set mtp-viz reads")
        pos = _SPACE.match(line, m.end()).end()
        if not line.startswith("=", pos):
            raise ValueError("a label without a value")
        pos = _SPACE.match(line, pos + 1).end()
        if not line.startswith('"', pos):
            raise ValueError("a label value without quotes")
        value, pos = _value(line, pos + 1)
        out.append((keep.setdefault(m.group(), m.group()), keep.setdefault(value, value)))
        pos = _SPACE.match(line, pos).end()
        if line.startswith(",", pos):
            pos += 1


def _sample(line: str, keep: dict[str, str]) -> Sample:
    m = _NAME.match(line)
    if m is None or m.end() > MAX_LABEL_CHARS:
        raise ValueError("not a Prometheus sample")
    labels, pos = _labels(line, m.end() + 1, keep) if line.startswith("{", m.end()) else ((), m.end())
    rest = line[pos:pos + 200].split() if pos < len(line) and line[pos] in " \t" else []
    if not 1 <= len(rest) <= 2 or len(line) - pos > 200:
        raise ValueError("not a Prometheus sample")
    return Sample(keep.setdefault(m.group(), m.group()), labels, float(rest[0]))  # float() reads NaN, +Inf


def parse(text: str) -> list[Sample]:
    """Every sample of a Prometheus text exposition; comments and blank lines skipped. In
    memory linear in the page: one pass per line, no backtracking, label values kept to
    :data:`MAX_LABEL_CHARS`, repeated names and values held once.

    Raises ValueError on a line that is not a sample, a sample with more than
    :data:`MAX_LABELS` labels, or more than :data:`MAX_SAMPLES` samples (the caller says
    "not a metrics page")."""
    samples: list[Sample] = []
    keep: dict[str, str] = {}
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        if len(samples) == MAX_SAMPLES:
            raise ValueError(f"more than {MAX_SAMPLES} samples")
        samples.append(_sample(line, keep))
    return samples


@dataclass(frozen=True)
class SpecDecodeCounters:
    """A server's cumulative speculative decoding counters (vLLM's summed over engines)."""
    enabled: bool                      # the server exports spec-decode counters at all
    drafts: float = 0.0                # verify steps with drafts
    draft_tokens: float = 0.0
    accepted_tokens: float = 0.0
    accepted_per_pos: tuple[float, ...] = ()   # index k: steps that accepted draft k
    generation_tokens: float = 0.0     # all output tokens (the family's ``generated`` counter)
    models: tuple[str, ...] = ()       # model_name labels seen (the first MAX_MODELS)
    model_count: int = 0               # how many different ones

    @property
    def acceptance_rate(self) -> float | None:
        """accepted ÷ drafted."""
        return self.accepted_tokens / self.draft_tokens if self.draft_tokens else None

    @property
    def mean_acceptance_length(self) -> float | None:
        """τ = 1 + accepted ÷ verify steps (the target's own token included)."""
        return 1 + self.accepted_tokens / self.drafts if self.drafts else None

    def per_position(self, conditional: bool = False) -> list[float | None]:
        """Acceptance per draft position: unconditional per_pos[k] ÷ drafts, or
        conditional per_pos[k] ÷ per_pos[k-1] (given the earlier drafts were accepted)."""
        out = []
        for k, a in enumerate(self.accepted_per_pos):
            reached = self.drafts if k == 0 or not conditional else self.accepted_per_pos[k - 1]
            out.append(a / reached if reached else None)
        return out


def _position(s: Sample, who: str) -> int:
    """The draft position a per-position sample counts; within 0..MAX_POSITIONS-1."""
    k = int(s.label("position", "0"))  # not a number: ValueError, "not a Prometheus page"
    if not 0 <= k < MAX_POSITIONS:
        raise UserError(f"The /metrics of {clip(who)} counts draft positions past {MAX_POSITIONS}, "
                        "more than any draft mtp-viz reads.")
    return k


def _counter(s: Sample, who: str) -> float:
    """A counter's value, refused when it cannot be a count (NaN, ±Inf, negative, absurd)."""
    if not (math.isfinite(s.value) and 0 <= s.value <= MAX_COUNTER):
        raise UserError(f"The /metrics of {clip(who)} holds a speculative decoding value that is "
                        "not a sensible counter.")
    return s.value


def spec_decode(samples: list[Sample], model: str | None = None,
                who: str = "the server", family: Family = VLLM) -> SpecDecodeCounters:
    """Reduce the samples to the spec-decode counters of ``family`` (one model's, when given).

    ``who`` names the server in the UserError sentence for a position past
    :data:`MAX_POSITIONS` or a counter that is not a sensible count."""
    sums = {"drafts": 0.0, "draft_tokens": 0.0, "accepted_tokens": 0.0}
    per_pos: dict[int, float] = {}
    generated, enabled = 0.0, False
    wanted = model[:MAX_LABEL_CHARS] if model is not None else None   # as the page's names are kept
    for s in samples:
        name = s.label("model_name")
        if wanted is not None and name and name != wanted:
            continue
        if s.name == family.generated:
            generated += _counter(s, who)
        if not (s.name.startswith(family.prefix) and s.name.endswith("_total")):
            continue
        enabled = True
        kind = s.name[len(family.prefix):-len("_total")]
        if kind == "accepted_tokens_per_pos":
            k = _position(s, who)
            per_pos[k] = per_pos.get(k, 0.0) + _counter(s, who)
        elif kind in ("drafts", "draft_tokens", "accepted_tokens"):
            sums[kind] += _counter(s, who)
    pos = tuple(per_pos.get(k, 0.0) for k in range(max(per_pos) + 1)) if per_pos else ()
    names = [n for n in dict.fromkeys(s.label("model_name") for s in samples) if n]
    return SpecDecodeCounters(enabled, sums["drafts"], sums["draft_tokens"], sums["accepted_tokens"], pos,
                              generated, tuple(names[:MAX_MODELS]), len(names))


def delta(after: SpecDecodeCounters, before: SpecDecodeCounters) -> SpecDecodeCounters:
    """The traffic between two scrapes (counters only grow; a restart resets them, and
    then ``after`` alone is the traffic since the restart)."""
    if after.drafts < before.drafts or after.draft_tokens < before.draft_tokens:
        return after
    n = max(len(after.accepted_per_pos), len(before.accepted_per_pos))
    pad = lambda t: tuple(t) + (0.0,) * (n - len(t))  # noqa: E731
    return SpecDecodeCounters(
        after.enabled, after.drafts - before.drafts, after.draft_tokens - before.draft_tokens,
        after.accepted_tokens - before.accepted_tokens,
        tuple(a - b for a, b in zip(pad(after.accepted_per_pos), pad(before.accepted_per_pos))),
        after.generation_tokens - before.generation_tokens, after.models, after.model_count)
