"""Known model pairs. Pure data: importing this loads neither torch nor a model.

Sizes are approximate bf16 weights on disk; memory is what the pair needs to run at
batch size 1 with a short context (weights plus a little KV cache).
"""
from __future__ import annotations

import os
from dataclasses import dataclass

from mtp_viz.paths import assets_dir


@dataclass(frozen=True)
class Preset:
    key: str
    label: str
    target: str
    drafter: str | None
    download: str
    memory: str
    note: str = ""


PRESETS: dict[str, Preset] = {p.key: p for p in [
    Preset("tiny", "Bundled tiny pair (offline, CPU)", "assets/tiny/target", "assets/tiny/drafter",
           "in the repository", "< 200 MB RAM",
           "A small Gemma 4 pair trained on Python's standard library; runs anywhere."),
    Preset("e2b", "Gemma 4 E2B + MTP assistant", "google/gemma-4-E2B-it",
           "google/gemma-4-E2B-it-assistant", "≈ 10 GB", "≈ 11 GB (GPU with 12 GB+, or 16 GB RAM on CPU, slow)"),
    Preset("e4b", "Gemma 4 E4B + MTP assistant", "google/gemma-4-E4B-it",
           "google/gemma-4-E4B-it-assistant", "≈ 16 GB", "≈ 17 GB (GPU with 24 GB)"),
    Preset("31b", "Gemma 4 31B + MTP assistant", "google/gemma-4-31B-it",
           "google/gemma-4-31B-it-assistant", "≈ 62 GB", "≈ 66 GB (one 80 GB GPU)"),
    Preset("26b-a4b", "Gemma 4 26B-A4B (MoE) + MTP assistant", "google/gemma-4-26B-A4B-it",
           "google/gemma-4-26B-A4B-it-assistant", "≈ 52 GB", "≈ 55 GB (one 80 GB GPU)",
           "Mixture of experts: drafts may route to other experts, so at batch size 1 "
           "verification can cost as much as it saves and MTP may not speed it up."),
]}


def resolve(spec: str) -> tuple[str, str | None]:
    """A preset name → (target, drafter); anything else passes through unchanged."""
    preset = PRESETS.get(spec.strip().lower())
    if preset is None:
        return spec, None
    if preset.key == "tiny":
        root = assets_dir() / "tiny"
        return str(root / "target"), str(root / "drafter")
    return preset.target, preset.drafter


def is_local(spec: str) -> bool:
    """A folder rather than a hub id: it starts like a path, has more than one '/', or
    names a folder that exists (transformers, too, prefers a folder to a hub id)."""
    spec = spec.strip()
    return (spec.startswith((".", "/", "~")) or spec.count("/") > 1 or (os.sep != "/" and os.sep in spec)
            or os.path.isdir(os.path.expanduser(spec)))


def canonical(spec: str) -> str:
    """One key per model however it is written: a preset's name in lower case, a
    folder's real path (``./a/``, ``a//b`` and ``../x/a`` are the same folder), or the
    hub id as given."""
    spec = spec.strip()
    if spec.lower() in PRESETS:
        return spec.lower()
    if is_local(spec):
        return os.path.realpath(os.path.expanduser(spec))
    return spec
