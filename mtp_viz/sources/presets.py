"""Known model pairs. Pure data: importing this loads neither torch nor a model.

Sizes are approximate bf16 weights on disk. Memory is what the pair needs to run at
batch size 1 with a short context (weights plus a little KV cache), in the two default
precisions: bfloat16, a GPU's, and float32, a CPU's (:mod:`.precision`; ``--dtype``,
``--target-precision`` and ``MTP_VIZ_DTYPE`` choose; int8 and int4 take less). float32 takes four bytes per
parameter where bfloat16 takes two, so it needs twice the memory: E2B's 5.1B parameters
are ≈ 10 GB in bfloat16 and ≈ 20 GB in float32. ``load_pair`` checks the figure for
the model at hand before loading it (:mod:`.memory`).
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from mtp_viz.errors import UserError, clip
from mtp_viz.paths import assets_dir


@dataclass(frozen=True)
class Preset:
    key: str
    label: str
    target: str
    drafter: str | None
    download: str             # what a first run downloads ("" for none: it ships in the package)
    memory_bf16: str          # to run it in bfloat16 (a GPU's default)
    memory_float32: str       # to run it in float32 (a CPU's default): twice the bf16 figure
    hardware: str = ""        # what that takes
    note: str = ""


# The 12B family's figures are estimates from its shape (its config was not at hand):
# a text model of width 3840 laid out as Gemma 3 12B's (48 layers, FFN 15360, 16 query
# and 8 K/V heads of 256, vocabulary 262144) counts 12.14B parameters on the meta
# device, its vision tower perhaps 0.4B more, and the assistant (4 layers of width
# 1024: a 262144 × 1024 embedding is 0.27B of its 0.34B) brings it to ≈ 12.9B:
# ≈ 25.8 GB at 2 bytes a parameter (bf16), ≈ 52 GB at 4 (float32), plus the KV cache.
PRESETS: dict[str, Preset] = {p.key: p for p in [
    Preset("tiny", "Bundled tiny pair (offline, CPU)", "assets/tiny/target", "assets/tiny/drafter",
           "", "< 200 MB", "< 200 MB", "",
           "A small Gemma 4 pair trained on Python's standard library; runs anywhere."),
    Preset("e2b", "Gemma 4 E2B + MTP assistant", "google/gemma-4-E2B-it",
           "google/gemma-4-E2B-it-assistant", "≈ 10 GB", "≈ 11 GB", "≈ 22 GB",
           "a GPU with 12 GB+; on a CPU (slow) 32 GB RAM, or 16 GB in bfloat16"),
    Preset("e4b", "Gemma 4 E4B + MTP assistant", "google/gemma-4-E4B-it",
           "google/gemma-4-E4B-it-assistant", "≈ 16 GB", "≈ 17 GB", "≈ 34 GB",
           "a GPU with 24 GB; on a CPU (slow) 48 GB RAM, or 24 GB in bfloat16"),
    Preset("12b", "Gemma 4 12B + MTP assistant", "google/gemma-4-12B-it",
           "google/gemma-4-12B-it-assistant", "≈ 26 GB", "≈ 28 GB", "≈ 56 GB",
           "a GPU with 32 GB+",
           "The unified 12B family; its sizes are estimates from its shape, not measured."),
    Preset("31b", "Gemma 4 31B + MTP assistant", "google/gemma-4-31B-it",
           "google/gemma-4-31B-it-assistant", "≈ 62 GB", "≈ 66 GB", "≈ 132 GB", "one 80 GB GPU"),
    Preset("26b-a4b", "Gemma 4 26B-A4B (MoE) + MTP assistant", "google/gemma-4-26B-A4B-it",
           "google/gemma-4-26B-A4B-it-assistant", "≈ 52 GB", "≈ 55 GB", "≈ 110 GB", "one 80 GB GPU",
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


def display_name(spec: str) -> str:
    """A model's name to show: a preset or hub id as given, a folder by its own name (a
    page never shows a machine's paths)."""
    spec = spec.strip()
    return os.path.basename(os.path.normpath(os.path.expanduser(spec))) if is_local(spec) else spec


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


def model_path(spec: str) -> str:
    """What transformers is given: a folder's expanded path, or the hub id."""
    if is_local(spec):
        folder = Path(spec).expanduser()
        if not folder.is_dir():
            raise UserError(f"There is no loadable model folder at {clip(spec)}.")
        return str(folder)
    return spec


def default_drafter(spec: str) -> str | None:
    """Gemma 4 targets have an MTP assistant named '<target>-assistant'."""
    if is_local(spec):
        sibling = Path(spec.rstrip("/\\") + "-assistant")
        return str(sibling) if sibling.expanduser().is_dir() else None
    return spec + "-assistant"

HUB_PROBE_SECONDS = 2.0

def hub_reachable() -> bool:
    """Whether the Hub answers a connection within :data:`HUB_PROBE_SECONDS` (and offline
    mode is off): never tens of seconds of retries for a shape that ships anyway."""
    if os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in ("1", "true", "yes", "on"):
        return False
    import socket
    from urllib.parse import urlparse

    from huggingface_hub import constants
    url = urlparse(constants.ENDPOINT)
    try:
        with socket.create_connection((url.hostname, url.port or 443), timeout=HUB_PROBE_SECONDS):
            return True
    except OSError:
        return False


def cached(hub_id: str) -> bool:
    """Whether the local Hugging Face cache holds ``hub_id``'s config (no network)."""
    from huggingface_hub import try_to_load_from_cache
    try:
        return isinstance(try_to_load_from_cache(hub_id, "config.json"), str)
    except Exception:  # noqa: BLE001 - a name the hub would refuse is not cached either
        return False


def check_reachable(spec: str) -> None:
    """One sentence, at once, for a hub id (or a preset's checkpoint) that is neither cached
    nor reachable, naming the closest preset: never tens of seconds of retries for a
    misspelt or unreachable name offline. A name that is no hub id at all is left to the
    loader, which says so."""
    from huggingface_hub.utils import HFValidationError, validate_repo_id
    try:
        validate_repo_id(spec.strip())
    except HFValidationError:
        return
    key = spec.strip().lower()
    preset = PRESETS.get(key)
    if is_local(spec) or (preset and not preset.download):
        return
    hub_id = preset.target if preset else spec.strip()
    if cached(hub_id) or hub_reachable():
        return
    if preset:   # a preset's checkpoint, not downloaded, with no Hub to download it from
        raise UserError(f"{preset.key} ({hub_id}) is not in the local Hugging Face cache and the Hub cannot be "
                        f"reached to download it ({preset.download}); use the bundled tiny pair, or "
                        f"random weights at its real shape for timings (--weights random).")
    import difflib
    near = difflib.get_close_matches(key, list(PRESETS), n=1, cutoff=0.5)
    hint = f"did you mean {near[0]}? " if near else ""
    raise UserError(f"{clip(spec)} is not a preset, a model folder or in the local Hugging Face cache, and the "
                    f"Hub cannot be reached; {hint}the presets are {', '.join(PRESETS)}.")
