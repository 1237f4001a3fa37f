"""Traces: recorded runs as JSON lines, the same events `mtp-viz generate --jsonl` prints.

A trace is the speculative run's events, then (when the baseline ran) the
autoregressive run's, each run opening with its own ``start`` event. Written traces
open with a header line, ``{"type": "trace", "format": "mtp-viz-trace", "version": 1}``;
readers also take a file without it, which is exactly what ``generate --jsonl`` prints.

A trace may come from anyone (an upload to a public app), so reading it is strict and
bounded: at most :data:`MAX_BYTES` bytes (a larger file is refused by its size, before
any of it is read) and :data:`MAX_EVENTS` events, arrays and objects nested at most
:data:`MAX_DEPTH` deep (checked on each line's text before it is decoded, so the outcome
does not depend on the process's recursion limit), every field of the declared type and
within the range the views can show (times from 0 to 24 hours, probabilities from 0 to
1, counts not negative, the settings the views read of their type), runs in order.
Anything else is one :class:`UserError` sentence that names a line number and a field
name at most, never the file's contents or its path. Reading is linear in the trace's
size: each event type's field checks are built once per class (:func:`_checks`).

``python -m mtp_viz.sources.trace`` regenerates the example traces shipped in
``mtp_viz/assets/traces/`` from the bundled tiny pair (see :func:`main`).
"""
from __future__ import annotations

import functools
import json
import math
import os
import re
import typing
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence

from mtp_viz.engine.engines import ENGINES
from mtp_viz.engine.events import EVENT_TYPES, Done, Error, Event, Start, Step, event_from_dict, renamed
from mtp_viz.errors import UserError, clip

FORMAT = "mtp-viz-trace"
VERSION = 1
MAX_BYTES = 5_000_000   # a 64-token run with its baseline is ~40 kB; this is 100 of them
MAX_EVENTS = 100_000
MAX_DEPTH = 32          # arrays and objects in one line; real events nest 5 deep at most (server metrics)
MODES = ("speculative", "autoregressive")
MAX_SECONDS = 24 * 3600.0   # longer than any run the app records; a replay waits this long
# the longest draft (and highest draft position) an event stream from outside may carry, a trace
# file's or a server's (sources.served): the engine drafts at most 16 (engine.decoding's
# MAX_DRAFT_TOKENS), but the views loop over every position, so what is read is bounded too
MAX_TRACE_DRAFT = 256
MAX_COUNT = 1_000_000_000   # steps, tokens, token ids: more than any run holds
MAX_EXPERTS = 4096          # experts of one layer: real mixtures have 8 to a few hundred
MAX_LAYERS = 1024           # mixture-of-experts layers, one count each, drawn by the views

_TIME = (0.0, MAX_SECONDS, "a time from 0 to 24 hours")
_PROBABILITY = (0.0, 1.0 + 1e-6, "a probability from 0 to 1")   # float32 rounding may pass 1
_DRAFT = (0, MAX_TRACE_DRAFT, f"a draft length or position from 0 to {MAX_TRACE_DRAFT}")
_COUNT = (0, MAX_COUNT, "a count from 0 to a billion")
_EXPERTS = (0, MAX_EXPERTS, f"at most {MAX_LAYERS} expert counts from 0 to {MAX_EXPERTS}")
# The range of an event's field, by name, beyond its type: the views divide by these,
# loop over them, plot them and wait for them. A number field not named here is a count.
_RANGES = {"t": _TIME, "seconds": _TIME, "draft_seconds": _TIME, "verify_seconds": _TIME, "compile_seconds": _TIME,
           "p": _PROBABILITY, "q": _PROBABILITY, "acceptance_rate": _PROBABILITY,
           "p_top": _PROBABILITY, "q_top": _PROBABILITY, "residual_top": _PROBABILITY,
           "draft_tokens": _DRAFT, "next_draft_tokens": _DRAFT, "index": _DRAFT, "agreed": _DRAFT,
           "tau": (0.0, MAX_TRACE_DRAFT + 1.0, f"a number of tokens per forward from 0 to {MAX_TRACE_DRAFT + 1}"),
           "experts_per_layer": _EXPERTS}
# List fields the views loop over whole, by name: the most items each may hold.
_LENGTHS = {"experts_per_layer": MAX_LAYERS}
# Fields the views compare with fixed words or write into HTML attributes unescaped.
_CHOICES = {"kind": ("correction", "extension"), "cut": ("", "eos", "max_new_tokens"),
            "stop_reason": ("", "eos", "max_new_tokens", "stopped"),
            "target_in_clusters": ("", "yes", "no")}
# The start event's settings the views read: (types, a check of the value, its words).
_NUMBER, _INT, _TEXT, _FLAG = (int, float), (int,), (str,), (bool,)


def _between(low: float, high: float):
    return lambda v: low <= v <= high


def _moe(v: dict) -> bool:
    """``Start.settings["experts"]``: {} (a dense target), or the mixture's shape and
    whether the run counted its experts (see engine.loop.experts_setting)."""
    if not v:
        return True
    whole = all(isinstance(v.get(k), int) and not isinstance(v.get(k), bool)
                for k in ("layers", "num_experts", "top_k"))
    return whole and 1 <= v["layers"] <= MAX_LAYERS and 1 <= v["top_k"] <= v["num_experts"] <= MAX_EXPERTS \
        and isinstance(v.get("counted", False), bool)


def _ran(v: dict) -> bool:
    """``Start.settings["ran"]`` (engine.events.Ran): two short texts and two flags."""
    texts = all(isinstance(v.get(k), str) and 0 < len(v[k]) <= 40 for k in ("engine", "label"))
    flags = all(isinstance(v.get(k, True), bool) for k in ("rejected_ids", "routing"))
    return texts and flags and set(v) <= {"engine", "label", "rejected_ids", "routing"}


_SETTINGS = {
    "temperature": (_NUMBER, _between(0, 100), "a number from 0 to 100"),
    "top_p": (_NUMBER, _between(0, 1), "a number from 0 to 1"),
    "top_k": (_INT, _between(0, MAX_COUNT), "a whole number from 0 to a billion"),
    "max_new_tokens": (_INT, _between(0, MAX_COUNT), "a whole number from 0 to a billion"),
    "draft_tokens": (_INT, _between(0, MAX_TRACE_DRAFT), f"a whole number from 0 to {MAX_TRACE_DRAFT}"),
    "max_draft_tokens": (_INT, _between(0, MAX_TRACE_DRAFT), f"a whole number from 0 to {MAX_TRACE_DRAFT}"),
    "seed": (_INT + (type(None),), None, "a whole number or null"),
    "clock": (_TEXT, ("wall", "cpu").__contains__, '"wall" or "cpu"'),
    # an engine of the table (engine.engines.ENGINES), read when a trace is checked
    "engine": (_TEXT, lambda v: v in ENGINES, " or ".join(f'"{name}"' for name in sorted(ENGINES))),
    "experts": ((dict,), _moe, "empty or a mixture of experts' layers, num_experts and top_k"),
    "ran": ((dict,), _ran, "what ran: its engine and label (short text), rejected_ids and routing (true or false)"),
    **{k: (_TEXT, None, "text") for k in ("drafter", "schedule", "backend", "server", "model", "api")},
    **{k: (_FLAG, None, "true or false") for k in ("chat", "server_speculates")},
    # what each model ran in (the stats line shows them): a precision's name, or null
    **{k: (_TEXT + (type(None),), lambda v: len(v) <= 40, "a precision's name or null")
       for k in ("target_precision", "drafter_precision")},
}

__all__ = ["FORMAT", "VERSION", "MAX_BYTES", "MAX_EVENTS", "MAX_DEPTH", "MAX_SECONDS", "MAX_TRACE_DRAFT", "header",
           "dumps", "write", "loads", "read", "split_runs", "spec_and_ar", "too_large"]


def header(**meta: str) -> dict[str, Any]:
    """The first line of a written trace; ``meta`` (e.g. a title) rides along, unread."""
    from mtp_viz.version import __version__
    return {"type": "trace", "format": FORMAT, "version": VERSION, "mtp_viz": __version__, **meta}


def dumps(events: Iterable[Event], **meta: str) -> str:
    """The header line, then one event per line (as ``generate --jsonl`` prints it)."""
    lines = [json.dumps(header(**meta))] + [json.dumps(e.to_dict(), ensure_ascii=False) for e in events]
    return "\n".join(lines) + "\n"


def write(path: str | Path, events: Iterable[Event], **meta: str) -> Path:
    path = Path(path)
    path.write_text(dumps(events, **meta), encoding="utf-8")
    return path


def too_large() -> str:
    """The sentence for a trace over :data:`MAX_BYTES` (the app's upload check says it too)."""
    return f"The trace is larger than {MAX_BYTES // 1_000_000} MB, the most this app reads."


def read(path: str | Path) -> list[Event]:
    """The events of a trace file; its size is checked before any of it is read (a
    file whose size is not known, a pipe, is read to :data:`MAX_BYTES` and one byte)."""
    try:
        with open(path, "rb") as f:
            if os.fstat(f.fileno()).st_size > MAX_BYTES:
                raise UserError(too_large())
            data = f.read(MAX_BYTES + 1)
    except OSError as err:
        raise UserError(unreadable(path, err)) from None
    return loads(data)


def unreadable(path: str | Path, err: OSError) -> str:
    """Why a trace file cannot be read, naming the file by its own name only (never the
    folder it is in: a server's paths are not a visitor's business)."""
    name = clip(Path(path).name or str(path))
    if isinstance(err, FileNotFoundError):
        return f"There is no trace file named {name}."
    if isinstance(err, IsADirectoryError):
        return f"{name} is a folder, not a trace file."
    return f"The trace file {name} cannot be read."


def _no_constants(name: str) -> Any:
    raise ValueError(name)  # NaN and Infinity are not JSON; a view cannot plot them


def loads(data: bytes | str) -> list[Event]:
    """The events of a trace, checked: see the module docstring."""
    if isinstance(data, str):
        data = data.encode("utf-8")
    if len(data) > MAX_BYTES:
        raise UserError(too_large())
    try:
        text = data.decode("utf-8-sig")  # an editor on Windows may save a byte-order mark
    except UnicodeDecodeError:
        raise UserError("The trace is not UTF-8 text.") from None
    events: list[Event] = []
    for n, line in enumerate(text.split("\n"), 1):  # JSON Lines: only \n ends a line (U+2028 may sit in a token)
        if not line.strip():
            continue
        _check_depth(line, n)  # before json.loads, whose recursion the line could exhaust
        try:
            d = json.loads(line, parse_constant=_no_constants)
        except (ValueError, RecursionError):  # RecursionError: cannot happen MAX_DEPTH deep
            raise UserError(f"Line {n} of the trace is not JSON.") from None
        if not isinstance(d, dict):
            raise UserError(f"Line {n} of the trace is not a JSON object.")
        if d.get("type") == "trace":
            _check_header(d, n, first=not events)
            continue
        if len(events) == MAX_EVENTS:
            raise UserError(f"The trace has more than {MAX_EVENTS} events, the most this app reads.")
        events.append(_event(d, n))
    split_runs(events)  # checks the runs' order
    return events


# A JSON string, its closing quote optional: an unclosed one runs to the end of the line,
# so every match ends where the next search starts and the scan stays linear.
_STRING = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"?', re.DOTALL)
_NOT_BRACKET = re.compile(r"[^\[\]{}]+")


def _check_depth(line: str, n: int) -> None:
    """Refuse a line whose arrays and objects nest deeper than :data:`MAX_DEPTH`, from its
    text and without recursion, so json.loads and everything after it never meets one.
    The brackets inside strings do not count; a line whose brackets do not pair is not
    JSON. Linear in the line's length."""
    if line.count("[") + line.count("{") <= MAX_DEPTH:  # every real line: no scan
        return
    brackets = _NOT_BRACKET.sub("", _STRING.sub("", line))
    if 2 * (brackets.count("[") + brackets.count("{")) != len(brackets):  # they cannot all close
        raise UserError(f"Line {n} of the trace is not JSON.")
    depth = 0
    for c in brackets:
        depth += 1 if c in "[{" else -1
        if depth < 0:  # a bracket closed that was never opened
            raise UserError(f"Line {n} of the trace is not JSON.")
        if depth > MAX_DEPTH:
            raise UserError(f"Line {n} of the trace nests arrays or objects more than {MAX_DEPTH} deep, "
                            "the most this app reads.")


def _check_header(d: dict, n: int, first: bool) -> None:
    if not first:
        raise UserError(f"Line {n} of the trace is a header, which only the first line may be.")
    if d.get("format") != FORMAT:
        raise UserError("The file is not an mtp-viz trace.")
    if d.get("version") != VERSION:
        raise UserError(f"The trace has an unknown format version; this mtp-viz reads version {VERSION}.")


def _event(d: dict, n: int) -> Event:
    d = renamed(d)   # an older trace's field names, read as today's
    cls = EVENT_TYPES.get(d.get("type")) if isinstance(d.get("type"), str) else None
    if cls is None:
        raise UserError(f"Line {n} of the trace has an unknown event type.")
    checks = _checks(cls)
    for name, value in d.items():
        if name in checks and not checks[name][0](value):
            raise UserError(f"Line {n} of the trace has a field of the wrong type.")
    for name, value in d.items():
        within = checks[name][1] if name in checks else None
        if within is not None and not within(value):
            raise UserError(_out_of_range(name, n))
    if cls is Start and isinstance(d.get("settings"), dict):
        _check_settings(d["settings"], n)
    if cls is Step and d.get("accepted", 0) > d.get("draft_tokens", 0):  # else "rejected -3"
        raise UserError(f"Line {n} of the trace has a step that kept more drafts than it drafted.")
    try:
        return event_from_dict(d)
    except (TypeError, ValueError):  # a required field is missing
        raise UserError(f"Line {n} of the trace misses a field its event needs.") from None


Check = Callable[[Any], bool]


@functools.cache
def _checks(cls: type[Event]) -> dict[str, tuple[Check, Check | None]]:
    """An event class's fields (but ``type``), each with the test of a JSON value for its
    declared type (:func:`_fits`) and the test of a value of that type for its range
    (:func:`_within`, None: any). Built once per class: resolving the type hints costs
    far more than checking an event, and a trace holds up to :data:`MAX_EVENTS`."""
    return {name: (_fits(hint), _within(name, hint))
            for name, hint in typing.get_type_hints(cls).items() if name != "type"}


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_float(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _is_str(value: Any) -> bool:
    return isinstance(value, str)


def _is_dict(value: Any) -> bool:
    return isinstance(value, dict)


def _fits(hint: Any) -> Check:
    """The test of whether a JSON value fits a field of type int, float, str, dict or a
    tuple of one of the scalars (``tuple[int, ...]``, ``tuple[float, ...]``,
    ``tuple[str, ...]``); a field of any other type takes any value."""
    origin = typing.get_origin(hint) or hint
    if origin is tuple:
        item = _fits(typing.get_args(hint)[0])
        return lambda value: isinstance(value, list) and all(map(item, value))
    return {int: _is_int, float: _is_float, str: _is_str, dict: _is_dict}.get(origin, lambda value: True)


def _within(name: str, hint: Any) -> Check | None:
    """The test of whether a value of a field's type is within what a view can show (see
    _RANGES, _LENGTHS, _CHOICES): a number or a list of numbers in its range, a word one
    of its choices; None for text and the settings mapping (checked on its own)."""
    if name in _CHOICES:
        return _CHOICES[name].__contains__
    origin = typing.get_origin(hint) or hint
    low, high, _ = _RANGES.get(name, _COUNT)
    if origin in (int, float):
        return lambda value: low <= value <= high
    if origin is tuple and typing.get_args(hint)[0] in (int, float):
        most = _LENGTHS.get(name)
        return lambda values: (most is None or len(values) <= most) and (
            not values or low <= min(values) and max(values) <= high)
    return None


def _out_of_range(name: str, n: int) -> str:
    if name in _CHOICES:
        return f"Line {n} of the trace has a {name!r} that is not one of its known values."
    return f"Line {n} of the trace has a {name!r} that is not {_RANGES.get(name, _COUNT)[2]}."


def _check_settings(settings: dict, n: int) -> None:
    """The start event's settings the views read, each of its type and range; other
    keys ride along unread."""
    for key, (types, check, words) in _SETTINGS.items():
        if key not in settings:
            continue
        v = settings[key]
        ok = isinstance(v, types) and (types is _FLAG or not isinstance(v, bool))  # True is an int
        ok = ok and not (isinstance(v, float) and not math.isfinite(v))
        if not ok or (check is not None and v is not None and not check(v)):
            raise UserError(f"Line {n} of the trace has a settings {key!r} that is not {words}.")


def split_runs(events: Sequence[Event]) -> list[list[Event]]:
    """The runs of a trace, each from its ``start`` event: at most one per mode, and
    nothing after a run's ``done`` or ``error`` but the next run's ``start``."""
    runs: list[list[Event]] = []
    for e in events:
        if isinstance(e, Start):
            if e.mode not in MODES:
                raise UserError("A run in the trace has an unknown mode.")
            if any(r[0].mode == e.mode for r in runs):
                raise UserError("The trace holds two runs of the same mode; a trace holds at most one of each.")
            runs.append([e])
        elif not runs:
            raise UserError("The trace does not begin with a start event.")
        elif isinstance(runs[-1][-1], (Done, Error)):
            raise UserError("The trace has events after a run ended that do not start a new run.")
        else:
            runs[-1].append(e)
    if not runs:
        raise UserError("The trace holds no events.")
    return runs


def spec_and_ar(events: Sequence[Event]) -> tuple[list[Event], list[Event]]:
    """The speculative and the autoregressive run of a trace (either may be empty)."""
    by_mode = {r[0].mode: r for r in split_runs(events)}
    return by_mode.get("speculative", []), by_mode.get("autoregressive", [])


# ---------------------------------------------------------------- the shipped examples

EXAMPLE_PROMPTS = ("prompt-1", "prompt-2", "prompt-5")  # held-out code: ast.py, taskgroups.py, bz2.py
EXAMPLE_SETTINGS = dict(drafter="mtp", max_new_tokens=64, draft_tokens=4, schedule="constant",
                        temperature=0.0, chat=False)


def examples_dir() -> Path:
    from mtp_viz.paths import assets_dir
    return assets_dir() / "traces"


def make_examples(out: Path | None = None) -> list[Path]:
    """Record the example traces with the bundled tiny pair: greedy, four drafts, 64
    tokens, then the baseline. Rerun after the bundled pair changes."""
    from mtp_viz.prompts import code_suite, load_prompts

    from .models import load_pair
    out = out or examples_dir()
    out.mkdir(parents=True, exist_ok=True)
    pair = load_pair("tiny", None)
    prompts = {p.id: p for p in load_prompts(code_suite(), default_category="code")}
    paths = []
    for pid in EXAMPLE_PROMPTS:
        p = prompts[pid]
        events = [e for mode in MODES for e in pair.generate(p.text, mode=mode, **EXAMPLE_SETTINGS)]
        name = p.title.replace("/", "-").removesuffix(".py")
        paths.append(write(out / f"{name}.jsonl", events, title=f"code · {p.title} (bundled tiny pair)"))
    return paths


if __name__ == "__main__":
    for path in make_examples():
        print(path)
