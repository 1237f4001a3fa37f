"""Traces: recorded runs as JSON lines, the same events `mtp-viz generate --jsonl` prints.

A trace is the speculative run's events, then (when the baseline ran) the
autoregressive run's, each run opening with its own ``start`` event. Written traces
open with a header line, ``{"type": "trace", "format": "mtp-viz-trace", "version": 1}``;
readers also take a file without it, which is exactly what ``generate --jsonl`` prints.

A trace may come from anyone (an upload to a public app), so reading it is strict and
bounded: at most :data:`MAX_BYTES` bytes and :data:`MAX_EVENTS` events, every field of
the declared type and within the range the views can show (times from 0 to 24 hours,
probabilities from 0 to 1, counts not negative, the settings the views read of their
type), runs in order. Anything else is one :class:`UserError` sentence that names a
line number and a field name at most, never the file's contents or its path.

``python -m mtp_viz.sources.trace`` regenerates the example traces shipped in
``mtp_viz/assets/traces/`` from the bundled tiny pair (see :func:`main`).
"""
from __future__ import annotations

import json
import math
import typing
from pathlib import Path
from typing import Any, Iterable, Sequence

from mtp_viz.engine.events import EVENT_TYPES, Done, Error, Event, Start, Step, event_from_dict
from mtp_viz.errors import UserError

FORMAT = "mtp-viz-trace"
VERSION = 1
MAX_BYTES = 5_000_000   # a 64-token run with its baseline is ~40 kB; this is 100 of them
MAX_EVENTS = 100_000
MODES = ("speculative", "autoregressive")
MAX_SECONDS = 24 * 3600.0   # longer than any run the app records; a replay waits this long
MAX_DRAFT = 256             # the app drafts at most 16; views loop over every position
MAX_COUNT = 1_000_000_000   # steps, tokens, token ids: more than any run holds
MAX_EXPERTS = 4096          # experts of one layer: real mixtures have 8 to a few hundred
MAX_LAYERS = 1024           # mixture-of-experts layers, one count each, drawn by the views

_TIME = (0.0, MAX_SECONDS, "a time from 0 to 24 hours")
_PROBABILITY = (0.0, 1.0 + 1e-6, "a probability from 0 to 1")   # float32 rounding may pass 1
_DRAFT = (0, MAX_DRAFT, f"a draft length or position from 0 to {MAX_DRAFT}")
_COUNT = (0, MAX_COUNT, "a count from 0 to a billion")
_EXPERTS = (0, MAX_EXPERTS, f"at most {MAX_LAYERS} expert counts from 0 to {MAX_EXPERTS}")
# The range of an event's field, by name, beyond its type: the views divide by these,
# loop over them, plot them and wait for them. A number field not named here is a count.
_RANGES = {"t": _TIME, "seconds": _TIME, "draft_seconds": _TIME, "verify_seconds": _TIME, "compile_seconds": _TIME,
           "p": _PROBABILITY, "q": _PROBABILITY, "acceptance_rate": _PROBABILITY,
           "p_top": _PROBABILITY, "q_top": _PROBABILITY, "residual_top": _PROBABILITY,
           "draft_len": _DRAFT, "next_draft_len": _DRAFT, "index": _DRAFT, "agreed": _DRAFT,
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


_SETTINGS = {
    "temperature": (_NUMBER, _between(0, 100), "a number from 0 to 100"),
    "top_p": (_NUMBER, _between(0, 1), "a number from 0 to 1"),
    "top_k": (_INT, _between(0, MAX_COUNT), "a whole number from 0 to a billion"),
    "max_new_tokens": (_INT, _between(0, MAX_COUNT), "a whole number from 0 to a billion"),
    "draft_tokens": (_INT, _between(0, MAX_DRAFT), f"a whole number from 0 to {MAX_DRAFT}"),
    "max_draft_tokens": (_INT, _between(0, MAX_DRAFT), f"a whole number from 0 to {MAX_DRAFT}"),
    "seed": (_INT + (type(None),), None, "a whole number or null"),
    "clock": (_TEXT, ("wall", "cpu").__contains__, '"wall" or "cpu"'),
    "engine": (_TEXT, ("compiled", "eager").__contains__, '"compiled" or "eager"'),
    "experts": ((dict,), _moe, "empty or a mixture of experts' layers, num_experts and top_k"),
    **{k: (_TEXT, None, "text") for k in ("drafter", "schedule", "backend", "server", "model", "api")},
    **{k: (_FLAG, None, "true or false") for k in ("chat", "server_speculates")},
    # what each model ran in (the stats line shows them): a precision's name, or null
    **{k: (_TEXT + (type(None),), lambda v: len(v) <= 40, "a precision's name or null")
       for k in ("target_precision", "drafter_precision")},
}

__all__ = ["FORMAT", "VERSION", "MAX_BYTES", "MAX_EVENTS", "MAX_SECONDS", "header", "dumps", "write", "loads", "read",
           "split_runs", "spec_and_ar"]


def header(**meta: str) -> dict[str, Any]:
    """The first line of a written trace; ``meta`` (e.g. a title) rides along, unread."""
    from mtp_viz import __version__
    return {"type": "trace", "format": FORMAT, "version": VERSION, "mtp_viz": __version__, **meta}


def dumps(events: Iterable[Event], **meta: str) -> str:
    """The header line, then one event per line (as ``generate --jsonl`` prints it)."""
    lines = [json.dumps(header(**meta))] + [json.dumps(e.to_dict(), ensure_ascii=False) for e in events]
    return "\n".join(lines) + "\n"


def write(path: str | Path, events: Iterable[Event], **meta: str) -> Path:
    path = Path(path)
    path.write_text(dumps(events, **meta), encoding="utf-8")
    return path


def read(path: str | Path) -> list[Event]:
    """The events of a trace file; its size is checked before any of it is read."""
    try:
        with open(path, "rb") as f:
            data = f.read(MAX_BYTES + 1)
    except OSError:
        raise UserError("The trace file cannot be read.") from None
    return loads(data)


def _no_constants(name: str) -> Any:
    raise ValueError(name)  # NaN and Infinity are not JSON; a view cannot plot them


def loads(data: bytes | str) -> list[Event]:
    """The events of a trace, checked: see the module docstring."""
    if isinstance(data, str):
        data = data.encode("utf-8")
    if len(data) > MAX_BYTES:
        raise UserError(f"The trace is larger than {MAX_BYTES // 1_000_000} MB, the most this app reads.")
    try:
        text = data.decode("utf-8-sig")  # an editor on Windows may save a byte-order mark
    except UnicodeDecodeError:
        raise UserError("The trace is not UTF-8 text.") from None
    events: list[Event] = []
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            d = json.loads(line, parse_constant=_no_constants)
        except (ValueError, RecursionError):  # RecursionError: arrays nested thousands deep
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


def _check_header(d: dict, n: int, first: bool) -> None:
    if not first:
        raise UserError(f"Line {n} of the trace is a header, which only the first line may be.")
    if d.get("format") != FORMAT:
        raise UserError("The file is not an mtp-viz trace.")
    if d.get("version") != VERSION:
        raise UserError(f"The trace has an unknown format version; this mtp-viz reads version {VERSION}.")


def _event(d: dict, n: int) -> Event:
    cls = EVENT_TYPES.get(d.get("type")) if isinstance(d.get("type"), str) else None
    if cls is None:
        raise UserError(f"Line {n} of the trace has an unknown event type.")
    hints = typing.get_type_hints(cls)
    for name, value in d.items():
        if name in hints and name != "type" and not _fits(value, hints[name]):
            raise UserError(f"Line {n} of the trace has a field of the wrong type.")
    for name, value in d.items():
        if name in hints and name != "type":
            _check_range(name, value, n)
    if cls is Start and isinstance(d.get("settings"), dict):
        _check_settings(d["settings"], n)
    if cls is Step and d.get("accepted", 0) > d.get("draft_len", 0):  # else "rejected -3"
        raise UserError(f"Line {n} of the trace has a step that kept more drafts than it drafted.")
    try:
        return event_from_dict(d)
    except (TypeError, ValueError):  # a required field is missing
        raise UserError(f"Line {n} of the trace misses a field its event needs.") from None


def _fits(value: Any, hint: Any) -> bool:
    """Whether a JSON value fits a field of type int, float, str, dict or a tuple of one
    of the scalars (``tuple[int, ...]``, ``tuple[float, ...]``, ``tuple[str, ...]``)."""
    origin = typing.get_origin(hint) or hint
    if origin is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if origin is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
    if origin is str:
        return isinstance(value, str)
    if origin is tuple:
        item = typing.get_args(hint)[0]
        return isinstance(value, list) and all(_fits(x, item) for x in value)
    if origin is dict:
        return isinstance(value, dict)
    return True


def _check_range(name: str, value: Any, n: int) -> None:
    """A field of the right type, within what a view can show (see _RANGES, _CHOICES)."""
    if name in _CHOICES:
        if value not in _CHOICES[name]:
            raise UserError(f"Line {n} of the trace has a {name!r} that is not one of its known values.")
        return
    numbers = value if isinstance(value, list) else [value]
    if not all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in numbers):
        return  # text, or the settings mapping (checked on its own)
    low, high, words = _RANGES.get(name, _COUNT)
    if not all(low <= x <= high for x in numbers) or len(numbers) > _LENGTHS.get(name, len(numbers)):
        raise UserError(f"Line {n} of the trace has a {name!r} that is not {words}.")


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
