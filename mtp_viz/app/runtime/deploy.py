"""Deployment settings: the environment's readers (``MTP_VIZ_*``), the allow-list
(``MTP_VIZ_ALLOWED_MODELS`` and what it offers), the picker's entries and the pair a page
opens on. No torch, no gradio; :mod:`.service` loads the pairs these name."""
from __future__ import annotations

import os
from typing import Any

from mtp_viz.errors import UserError
from mtp_viz.sources.precision import PRECISIONS, Precision, precision_name
from mtp_viz.sources.presets import PRESETS, canonical, display_name, resolve

from .pairs import pair_key

E2B = ("google/gemma-4-E2B-it", "google/gemma-4-E2B-it-assistant")
WAITING = 16    # local runs, measurements and /generate calls open at once, each waiting for its
                # pair, then for its turn on the engine (MTP_VIZ_CONCURRENCY at once) inside


def env_int(name: str, default: int, minimum: int = 1) -> int:
    """A whole-number setting from the environment; the default when unset or not a number."""
    try:
        return max(minimum, int(os.environ.get(name, default)))
    except ValueError:
        return default


def env_cap() -> int:
    """The most new tokens one request may ask for (``MTP_VIZ_MAX_NEW_TOKENS_CAP``)."""
    return env_int("MTP_VIZ_MAX_NEW_TOKENS_CAP", 512)


# Token frames a second at most: the browser re-lays out the whole pane for each one, on
# the same CPU as the engine (on 2 cores, 20 a second cost the engine about 30% of its
# speed; benchmarks/results/app/app_speedup.md).
FRAMES_PER_SECOND = 4


def env_frame_interval() -> float:
    """Seconds between token frames of a live run (``MTP_VIZ_FRAMES_PER_SECOND``, 1 to 30)."""
    return 1 / min(30, env_int("MTP_VIZ_FRAMES_PER_SECOND", FRAMES_PER_SECOND))


def env_prompt_cap() -> int:
    """The longest prompt, in tokens, the app accepts (``MTP_VIZ_MAX_PROMPT_TOKENS``)."""
    return env_int("MTP_VIZ_MAX_PROMPT_TOKENS", 2048)


def env_dtype() -> str | None:
    """The precision both models of every pair load in unless the page asks for another
    (``MTP_VIZ_DTYPE``: float32, bfloat16, float16, int8 or int4); unset, the device's
    default (float32 on a CPU, twice bfloat16's memory). Anything else is one sentence:
    :func:`mtp_viz.app.page.layout.launch` refuses to start on it."""
    return precision_name(os.environ.get("MTP_VIZ_DTYPE"), "MTP_VIZ_DTYPE")


def env_sessions() -> int:
    """The most sessions Gradio keeps in memory (``MTP_VIZ_MAX_SESSIONS``); see
    :func:`mtp_viz.app.page.layout.launch`."""
    return env_int("MTP_VIZ_MAX_SESSIONS", 200)


def env_flag(name: str, default: bool) -> bool:
    """An on/off setting from the environment: 1/true/yes/on or 0/false/no/off; the
    default when unset or anything else."""
    value = os.environ.get(name, "").strip().lower()
    return True if value in ("1", "true", "yes", "on") else False if value in ("0", "false", "no", "off") \
        else default


class AllowList:
    """``MTP_VIZ_ALLOWED_MODELS``: comma-separated preset keys, hub ids or folders. When
    set, nothing else is loaded, offered or even looked at; when unset, anything is."""

    def __init__(self, spec: str | None = None):
        spec = os.environ.get("MTP_VIZ_ALLOWED_MODELS", "") if spec is None else spec
        self.entries = [s.strip() for s in spec.split(",") if s.strip()]
        self.keys = {canonical(s) for s in self.entries}

    @property
    def active(self) -> bool:
        return bool(self.entries)

    def allows(self, spec: str | None) -> bool:
        if not self.active or spec is None:
            return True
        return canonical(spec) in self.keys or canonical(resolve(spec)[0]) in self.keys

    def check(self, target: str, drafter: str | None) -> None:
        """Raise UserError unless both models are allowed; touches no file."""
        for spec in (target, drafter):
            if not self.allows(spec):
                raise UserError("This deployment only serves the models in its picker.")

    @property
    def precisions(self) -> tuple[str, ...]:
        """The precisions the page offers besides the default (``MTP_VIZ_PRECISIONS``,
        comma-separated; unknown names are ignored): every one unless locked down, none
        when locked down (each other precision is another pair in memory)."""
        spec = os.environ.get("MTP_VIZ_PRECISIONS")
        if spec is None:
            return () if self.active else PRECISIONS
        names = {n.strip().lower() for n in spec.split(",")}
        return tuple(p for p in PRECISIONS if p in names)

    @property
    def compile(self) -> bool:
        """Whether the page offers the compiled engine (``MTP_VIZ_COMPILE``): by default
        yes, and no when locked down (a compile takes a CPU for minutes)."""
        return env_flag("MTP_VIZ_COMPILE", not self.active)

    @property
    def engines(self) -> tuple[str, ...]:
        """The engines the page offers (:data:`mtp_viz.engine.engines.ENGINES`): every one,
        less those that compile where :attr:`compile` says no."""
        from mtp_viz.engine.engines import ENGINES
        return tuple(name for name, e in ENGINES.items() if self.compile or not e.compiles)

    def check_build(self, precision: "Precision | None", engine: str) -> None:
        """Raise UserError unless this deployment offers the precisions and engine asked."""
        from mtp_viz.engine.engines import ENGINES
        for name in (precision.target, precision.drafter) if precision else ():
            if name is not None and name not in self.precisions:
                raise UserError(f"This deployment does not offer the {name} precision.")
        if engine not in self.engines:
            raise UserError(f"This deployment does not offer the {ENGINES[engine].label}.")


def presets(allow: AllowList) -> dict[str, dict[str, Any]]:
    """The model picker's entries: key -> label, target, drafter and a one-line hint.
    With an allow-list, only the presets it names, plus its hub ids and folders."""
    out = {}
    for key, p in PRESETS.items():
        if allow.active and canonical(key) not in allow.keys:
            continue
        memory = (p.memory_bf16 if p.memory_bf16 == p.memory_float32 else
                  f"{p.memory_bf16} in bfloat16, {p.memory_float32} in float32 (a CPU's default)")
        fetch = f"Download {p.download}" if p.download else "Nothing to download (in the package)"
        hint = f"{fetch}; memory {memory}" + (f": {p.hardware}." if p.hardware else ".")
        if p.note:
            hint += " " + p.note
        # the bundled pair is loaded by name, so models resolves its folders
        target, drafter = ("tiny", None) if key == "tiny" else (p.target, p.drafter)
        out[key] = dict(label=p.label, target=target, drafter=drafter, hint=hint)
    for spec in allow.entries:
        if canonical(spec) not in PRESETS:
            out[spec] = dict(label=spec, target=spec, drafter=None,
                             hint="A model this deployment serves.")
    return out


IN_MEMORY = "in-memory"   # the picker's key for mtp_viz.launch's pair when no preset names its models


def in_memory_key(presets: dict[str, dict[str, Any]], target: str, drafter: str | None) -> str:
    """The picker's key for a pair already in memory: the preset of the same models (the
    bundled pair opens as "tiny", with its code prompts), else :data:`IN_MEMORY`, added to
    ``presets`` under the models' names."""
    key = pair_key(target, drafter)
    found = next((k for k, p in presets.items() if pair_key(p["target"], p["drafter"]) == key), None)
    if found is not None:
        return found
    name = display_name(target) + (f" + {display_name(drafter)}" if drafter else "")
    presets[IN_MEMORY] = dict(label=f"{name} (in memory)", target=target, drafter=drafter, name=name,
                              hint="The pair given to mtp_viz.launch, already in memory: no second load.")
    return IN_MEMORY


def e2b_cached() -> bool:
    """Whether Gemma 4 E2B and its assistant are already in the local Hugging Face cache."""
    from huggingface_hub import try_to_load_from_cache
    return all(isinstance(try_to_load_from_cache(repo, "config.json"), str) for repo in E2B)


def default_pair(allow: AllowList) -> tuple[str, str | None, str]:
    """(target, drafter, one-line note) from ``MTP_VIZ_TARGET``/``MTP_VIZ_DRAFTER``, else
    Gemma 4 E2B when cached, else the bundled tiny pair (or the allow-list's first)."""
    target = os.environ.get("MTP_VIZ_TARGET", "").strip()
    drafter = os.environ.get("MTP_VIZ_DRAFTER", "").strip() or None
    if target:
        return target, drafter, f"Model pair from MTP_VIZ_TARGET: {target}."
    if (not allow.active or allow.allows(E2B[0])) and e2b_cached():
        return E2B[0], E2B[1], "Gemma 4 E2B found in the local Hugging Face cache."
    if allow.active and not allow.allows("tiny"):
        return allow.entries[0], None, ""
    return "tiny", None, ("Running the bundled tiny pair; pick a Gemma 4 preset "
                          "(or set MTP_VIZ_TARGET=google/gemma-4-E2B-it) for the real thing.")


__all__ = ["AllowList", "E2B", "FRAMES_PER_SECOND", "IN_MEMORY", "WAITING", "default_pair", "e2b_cached", "env_cap",
           "env_dtype", "env_flag", "env_frame_interval", "env_int", "env_prompt_cap", "env_sessions", "in_memory_key",
           "presets"]
