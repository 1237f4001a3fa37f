"""What the app needs from the models, without importing torch until it is used.

The UI imports this module at build time; :mod:`mtp_viz.models` (and with it torch
and transformers) is imported only when a pair is first loaded. Pairs are loaded once
per process and shared by every session; loading can start in a background thread
at launch so the page answers at once and shows progress.
"""
from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable, Iterator

from .events import Error, Event

E2B = ("google/gemma-4-E2B-it", "google/gemma-4-E2B-it-assistant")


def presets() -> dict[str, dict[str, Any]]:
    """The model picker's entries: key -> label, target, drafter and a one-line hint.
    From :mod:`mtp_viz.presets` (pure data, no torch)."""
    from .presets import PRESETS

    out = {}
    for key, p in PRESETS.items():
        hint = f"Download {p.download}, memory {p.memory}."
        if p.note:
            hint += " " + p.note
        # the bundled pair is loaded by name, so models resolves its folders
        target, drafter = ("tiny", None) if key == "tiny" else (p.target, p.drafter)
        out[key] = dict(label=p.label, target=target, drafter=drafter, hint=hint)
    return out


def env_cap(default: int = 512) -> int:
    """The most new tokens one request may ask for (``MTP_VIZ_MAX_NEW_TOKENS_CAP``)."""
    try:
        return max(1, int(os.environ.get("MTP_VIZ_MAX_NEW_TOKENS_CAP", default)))
    except ValueError:
        return default


def e2b_cached() -> bool:
    """Whether Gemma 4 E2B and its assistant are already in the local Hugging Face cache."""
    try:
        from huggingface_hub import try_to_load_from_cache
    except ImportError:
        return False
    try:
        return all(isinstance(try_to_load_from_cache(repo, "config.json"), str) for repo in E2B)
    except Exception:  # a broken cache means "not cached"
        return False


def default_pair() -> tuple[str, str | None, str]:
    """(target, drafter, one-line note) from ``MTP_VIZ_TARGET``/``MTP_VIZ_DRAFTER``, else
    Gemma 4 E2B when cached, else the bundled tiny pair."""
    target = os.environ.get("MTP_VIZ_TARGET", "").strip()
    drafter = os.environ.get("MTP_VIZ_DRAFTER", "").strip() or None
    if target:
        return target, drafter, f"Model pair from MTP_VIZ_TARGET: {target}."
    if e2b_cached():
        return E2B[0], E2B[1], "Gemma 4 E2B found in the local Hugging Face cache."
    return "tiny", None, ("Running the bundled tiny pair; pick a Gemma 4 preset "
                          "(or set MTP_VIZ_TARGET=google/gemma-4-E2B-it) for the real thing.")


def user_message(exc: BaseException) -> str:
    """One sentence for an exception a user may have caused."""
    name = type(exc).__name__
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    if name == "UserError":
        return text or "That request cannot be run."
    if name in ("OutOfMemoryError", "MemoryError") or "out of memory" in text.lower():
        return "The model ran out of memory; try a smaller model or fewer new tokens."
    return f"Something went wrong ({name}: {text[:200]})." if text else f"Something went wrong ({name})."


@dataclass
class LoadState:
    status: str = "idle"           # idle | loading | ready | error
    message: str = ""
    started: float = 0.0
    pair: Any = None


Key = tuple[str, "str | None"]


class PairLoader:
    """Loads model pairs once per process and shares them; thread-safe.

    ``load`` is the function that does the work (default: ``models.get_pair``); tests
    pass their own."""

    def __init__(self, load: Callable[[str, str | None], Any] | None = None):
        self._load = load
        self._lock = threading.Lock()
        self._states: dict[Key, LoadState] = {}
        self._done: dict[Key, threading.Event] = {}

    def _default_load(self, target: str, drafter: str | None) -> Any:
        from . import models  # imports torch: only here, on first use
        return models.get_pair(target, drafter)

    def state(self, target: str, drafter: str | None) -> LoadState:
        with self._lock:
            return self._states.get((target, drafter), LoadState())

    def start(self, target: str, drafter: str | None) -> LoadState:
        """Begin loading in a background thread unless already loading or loaded."""
        key = (target, drafter)
        with self._lock:
            st = self._states.get(key)
            if st and st.status in ("loading", "ready"):
                return st
            st = self._states[key] = LoadState("loading", "", time.monotonic())
            self._done[key] = threading.Event()
        threading.Thread(target=self._work, args=(key,), daemon=True, name="mtp-viz-load").start()
        return st

    def _work(self, key: Key) -> None:
        try:
            pair = (self._load or self._default_load)(*key)
            new = LoadState("ready", "", self._states[key].started, pair)
        except BaseException as e:  # noqa: BLE001 - shown to the user as one sentence
            new = LoadState("error", user_message(e), self._states[key].started)
        with self._lock:
            self._states[key] = new
            self._done[key].set()

    def wait(self, target: str, drafter: str | None, timeout: float | None = None) -> LoadState:
        self.start(target, drafter)
        with self._lock:
            done = self._done[(target, drafter)]
        done.wait(timeout)
        return self.state(target, drafter)


def generate(pair: Any, prompt: str, settings: dict[str, Any],
             stop: threading.Event | None = None) -> Iterator[Event]:
    """``pair.generate`` with every failure turned into one ``Error`` event."""
    try:
        yield from pair.generate(prompt, stop=stop, **settings)
    except Exception as e:  # noqa: BLE001 - the app keeps serving
        yield Error(message=user_message(e))


# ---------------------------------------------------------------- one comparison run


class Session:
    """Per-browser-session state (kept in ``gr.State``): the stop switch and the
    recorded runs the race replay plays back."""

    def __init__(self) -> None:
        self.stop = threading.Event()
        self.spec: list[Event] = []
        self.ar: list[Event] = []
        self.greedy = True


FRAME_INTERVAL = 1 / 30  # tokens: a frame per step, but never more than a screen can show


def _stream(pair: Any, prompt: str, settings: dict[str, Any], sess: Session, out: list[Event],
            pane_key: str, chart_interval: float, frame_interval: float) -> Iterator[dict[str, Any]]:
    """Consume one run, recording into ``out``; yield a frame after each step, when a
    step's drafts are all out (so pending drafts show during verification, when the
    last verification took long enough to see them) and at the end. Steps faster than
    ``frame_interval`` share a frame; charts ride along at most every ``chart_interval``."""
    from . import charts, view
    from .events import Done, Drafted, Start, Step

    pane, stats = view.PaneRenderer(), view.RunStats()
    expected = int(settings.get("draft_tokens") or 0)
    last_chart = last_frame = time.monotonic()
    slow_verify = True
    for e in generate(pair, prompt, settings, sess.stop):
        out.append(e)
        pane.add(e)
        stats.add(e)
        if isinstance(e, Start):
            expected = int(e.settings.get("draft_tokens") or expected)
            continue
        now = time.monotonic()
        if isinstance(e, Drafted):
            # pending drafts get a frame when the last verification was slow enough to see
            if e.index + 1 < expected or not slow_verify:
                continue
        elif isinstance(e, Step):
            expected = e.next_draft_len or expected
            slow_verify = e.verify_seconds >= frame_interval
            if now - last_frame < frame_interval:
                continue
        elif not isinstance(e, (Done, Error)):
            continue
        last_frame = now
        frame: dict[str, Any] = {pane_key: pane.html(),
                                 pane_key + "_stats": view.stats_html(stats)}
        if isinstance(e, Error):
            frame["status"] = view.message_html(e.message, level="error")
        if pane_key == "spec" and isinstance(e, Step) and now - last_chart >= chart_interval:
            last_chart = now
            frame["figures"] = {"acceptance-plot": charts.acceptance_figure(out),
                                "draft-length-plot": charts.draft_length_figure(out)}
        yield frame


def compare_frames(pair: Any, prompt: str, settings: dict[str, Any], sess: Session, *,
                   baseline: bool = True, chart_interval: float = 0.5,
                   frame_interval: float = FRAME_INTERVAL) -> Iterator[dict[str, Any]]:
    """Speculative run, then (never at the same time) the autoregressive baseline, then
    every chart, the speedup and the identity check. Yields frames: dicts from display
    slot ("status", "spec", "spec_stats", "ar", "ar_stats", "figures", "compare",
    "theory") to HTML or figures; slots absent from a frame are unchanged."""
    from . import charts, view

    sess.greedy = float(settings.get("temperature") or 0.0) == 0.0
    yield {"status": view.message_html("Speculative decoding: drafting and verifying…")}
    yield from _stream(pair, prompt, {**settings, "mode": "speculative"}, sess, sess.spec,
                       "spec", chart_interval, frame_interval)
    failed = any(isinstance(e, Error) for e in sess.spec)
    if baseline and not failed and not sess.stop.is_set():
        yield {"status": view.message_html("Autoregressive baseline: one target forward per token…")}
        yield from _stream(pair, prompt, {**settings, "mode": "autoregressive"}, sess, sess.ar,
                           "ar", chart_interval, frame_interval)
        failed = any(isinstance(e, Error) for e in sess.ar)
    final: dict[str, Any] = {"figures": charts.all_figures(sess.spec, sess.ar),
                             "compare": view.compare_html(view.run_stats(sess.spec),
                                                          view.run_stats(sess.ar), greedy=sess.greedy),
                             "theory": theory_html(sess.spec, sess.ar)}
    if not failed:
        stopped = sess.stop.is_set()
        final["status"] = view.message_html(
            "Stopped." if stopped else
            "Done. Press Race replay to watch both runs side by side on their recorded timings.",
            level="warn" if stopped else "info")
    yield final


def theory_html(events: list[Event], baseline: list[Event]) -> str:
    """The "measured vs theory" panel, when :mod:`mtp_viz.metrics` provides one."""
    try:
        from .metrics import theory_panel_html  # type: ignore[attr-defined]
    except Exception:  # not written yet, or failed to import: leave the slot empty
        return ""
    try:
        return theory_panel_html(events, baseline or None)
    except Exception:  # noqa: BLE001 - a panel must never break a finished run
        return ""
