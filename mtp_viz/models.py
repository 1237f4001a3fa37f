"""Loading model pairs: presets, hub ids, local folders, the bundled offline pair.

``load_pair`` returns a :class:`ModelPair`, which encodes prompts (applying the chat
template of instruction models) and runs the engine. ``get_pair`` caches pairs per
process so that every session of the app shares one copy. ``trust_remote_code`` is
never enabled. Every failure a user can cause becomes a one-sentence ``UserError``.
"""
from __future__ import annotations

import os
import threading
from dataclasses import dataclass
from pathlib import Path

from .errors import UserError
from .presets import PRESETS, resolve

ASSISTANT_TYPES = ("gemma4_assistant", "gemma4_unified_assistant")
GEMMA4_TYPES = ("gemma4", "gemma4_text", "gemma4_unified")

__all__ = ["load_pair", "get_pair", "ModelPair", "PRESETS", "UserError"]


def pick_device(device: str | None = None) -> str:
    import torch
    if device:
        return device
    if torch.cuda.is_available():
        return "cuda"
    if getattr(torch.backends, "mps", None) and torch.backends.mps.is_available():
        return "mps"
    return "cpu"


def pick_dtype(device: str, dtype: str | None = None):
    """bf16 on accelerators, float32 on CPU (bf16 matmuls are slow on most CPUs)."""
    import torch
    if dtype:
        try:
            return {"bf16": torch.bfloat16, "bfloat16": torch.bfloat16, "fp16": torch.float16,
                    "float16": torch.float16, "fp32": torch.float32, "float32": torch.float32}[dtype]
        except KeyError:
            raise UserError(f"Unknown dtype {dtype!r}; use bfloat16, float16 or float32.") from None
    return torch.float32 if device == "cpu" else torch.bfloat16


def _explain(spec: str, err: Exception) -> UserError:
    """Turn a loading exception into one sentence."""
    msg = str(err)
    if isinstance(err, MemoryError) or "out of memory" in msg.lower():
        return UserError(f"Not enough memory to load {spec}; try a smaller model, a GPU, or --target tiny.")
    if "couldn't connect" in msg or "offline mode" in msg or "LocalEntryNotFound" in type(err).__name__:
        return UserError(f"{spec} is not in the local Hugging Face cache and cannot be downloaded "
                         "without a network connection; use --target tiny for the bundled pair.")
    if "is not a local folder" in msg or "Repository Not Found" in msg or "404" in msg \
            or "Repo id must be" in msg or "RepositoryNotFound" in type(err).__name__:
        return UserError(f"{spec} is neither a local model folder nor a model id on the Hugging Face Hub.")
    if "gated" in msg.lower() or "401" in msg or "403" in msg:
        return UserError(f"{spec} is gated: accept its license on the Hugging Face Hub and log in "
                         "with `hf auth login`.")
    return UserError(f"Could not load {spec}: {msg.splitlines()[0] if msg else type(err).__name__}.")


def _check_source(spec: str) -> None:
    looks_local = spec.startswith((".", "/", "~")) or os.sep in spec.strip("/").split("/", 1)[-1]
    if looks_local and not Path(spec).expanduser().is_dir():
        raise UserError(f"There is no model folder at {spec}.")


def _load(loader, spec: str, **kwargs):
    _check_source(spec)
    try:
        return loader(str(Path(spec).expanduser()) if Path(spec).expanduser().is_dir() else spec,
                      trust_remote_code=False, **kwargs)
    except UserError:
        raise
    except Exception as err:  # noqa: BLE001 - every loading failure becomes one sentence
        raise _explain(spec, err) from err


def _vocab_size(config) -> int:
    text = config.get_text_config() if hasattr(config, "get_text_config") else config
    return int(getattr(text, "vocab_size", 0) or 0)


def _hidden_size(config) -> int:
    text = config.get_text_config() if hasattr(config, "get_text_config") else config
    return int(getattr(text, "hidden_size", 0) or 0)


def _processor_chat_template(spec: str) -> str | None:
    """Multimodal Gemma 4 checkpoints may keep the chat template with the processor."""
    from transformers import AutoProcessor
    try:
        return getattr(AutoProcessor.from_pretrained(spec, trust_remote_code=False),
                       "chat_template", None)
    except Exception:  # noqa: BLE001 - no processor simply means no chat template
        return None


def _default_drafter(spec: str) -> str | None:
    """Gemma 4 targets have an MTP assistant named '<target>-assistant'."""
    local = Path(spec).expanduser()
    if local.is_dir():
        sibling = local.with_name(local.name + "-assistant")
        return str(sibling) if sibling.is_dir() else None
    return spec + "-assistant"


def load_pair(target: str, drafter: str | None = None, *, drafter_kind: str = "auto",
              device: str | None = None, dtype: str | None = None) -> "ModelPair":
    """Load a target and its drafter (or none, for prompt lookup).

    target: a preset name (``tiny``, ``e2b``, ...), a hub id or a local folder.
    drafter: a hub id or folder; by default the preset's, or ``<target>-assistant``
    for Gemma 4 targets. ``drafter_kind="lookup"`` loads no drafter at all.
    """
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    if not target or not str(target).strip():
        raise UserError("No target model was given.")
    target_spec, preset_drafter = resolve(target)
    device = pick_device(device)
    torch_dtype = pick_dtype(device, dtype)
    config = _load(AutoConfig.from_pretrained, target_spec)
    is_gemma4 = config.model_type in GEMMA4_TYPES
    if drafter is None and drafter_kind != "lookup":
        drafter = preset_drafter or (_default_drafter(target_spec) if is_gemma4 else None)
    elif drafter is not None:
        drafter, _ = resolve(drafter)

    drafter_config = _load(AutoConfig.from_pretrained, drafter) if drafter else None
    if drafter_config is not None:
        if drafter_config.model_type in ASSISTANT_TYPES and not is_gemma4:
            raise UserError(f"The Gemma 4 MTP drafter {drafter} needs a Gemma 4 target, "
                            f"but {target} is a {config.model_type} model.")
        if _vocab_size(drafter_config) != _vocab_size(config):
            raise UserError(f"{drafter} and {target} do not share a vocabulary "
                            f"({_vocab_size(drafter_config)} vs {_vocab_size(config)} tokens).")
        backbone = getattr(drafter_config, "backbone_hidden_size", None)
        if backbone is not None and backbone != _hidden_size(config):
            raise UserError(f"The MTP drafter {drafter} was made for a target of width {backbone}, "
                            f"but {target} has width {_hidden_size(config)}.")

    tokenizer = _load(AutoTokenizer.from_pretrained, target_spec)
    if getattr(tokenizer, "chat_template", None) is None and is_gemma4:
        tokenizer.chat_template = _processor_chat_template(target_spec)
    kwargs = dict(dtype=torch_dtype)
    if device != "cpu":
        kwargs["device_map"] = device
    target_model = _load(AutoModelForCausalLM.from_pretrained, target_spec, **kwargs).eval()
    drafter_model = (_load(AutoModelForCausalLM.from_pretrained, drafter, **kwargs).eval()
                     if drafter else None)
    return ModelPair(target_model, drafter_model, tokenizer, str(target), drafter, device)


_CACHE: dict[tuple, "ModelPair"] = {}
_CACHE_LOCK = threading.Lock()


def get_pair(target: str, drafter: str | None = None, **kwargs) -> "ModelPair":
    """Process-wide cache: each pair is loaded once and shared by all sessions."""
    key = (target, drafter, tuple(sorted(kwargs.items())))
    with _CACHE_LOCK:
        if key not in _CACHE:
            _CACHE[key] = load_pair(target, drafter, **kwargs)
        return _CACHE[key]


@dataclass
class ModelPair:
    target: object
    drafter_model: object | None
    tokenizer: object
    name: str
    drafter_name: str | None
    device: str

    @property
    def has_mtp(self) -> bool:
        return self.drafter_model is not None and \
            self.drafter_model.config.model_type in ASSISTANT_TYPES

    @property
    def eos_token_ids(self) -> list[int]:
        ids = set()
        for src in (getattr(self.target, "generation_config", None), self.target.config,
                    self.tokenizer):
            eos = getattr(src, "eos_token_id", None)
            ids.update([eos] if isinstance(eos, int) else (eos or []))
        return sorted(ids)

    def encode(self, prompt: str, chat: bool = True) -> list[int]:
        """Prompt text → ids; instruction models get their chat template (switchable off)."""
        if not prompt or not prompt.strip():
            raise UserError("The prompt is empty.")
        if chat and getattr(self.tokenizer, "chat_template", None):
            ids = self.tokenizer.apply_chat_template(
                [{"role": "user", "content": prompt}], add_generation_prompt=True, tokenize=True)
            ids = ids["input_ids"] if isinstance(ids, dict) or hasattr(ids, "keys") else ids
            return list(ids)
        return list(self.tokenizer(prompt)["input_ids"])

    def make_drafter(self, kind: str = "auto"):
        from .drafters import MTPDrafter, ModelDrafter, PromptLookupDrafter
        if kind == "auto":
            kind = "mtp" if self.has_mtp else ("model" if self.drafter_model is not None else "lookup")
        if kind == "mtp":
            if not self.has_mtp:
                raise UserError(f"{self.name} has no Gemma 4 MTP drafter loaded; "
                                "choose prompt lookup or load an assistant.")
            return MTPDrafter(self.drafter_model, self.target)
        if kind == "model":
            if self.drafter_model is None or self.has_mtp:
                raise UserError("An independent draft model is needed for the 'model' drafter.")
            return ModelDrafter(self.drafter_model)
        if kind == "lookup":
            k = getattr(self.drafter_model, "generation_config", None)
            return PromptLookupDrafter(default_draft_tokens=getattr(k, "num_assistant_tokens", 4) or 4)
        raise UserError(f"Unknown drafter {kind!r}; choose mtp, model or lookup.")

    def generate(self, prompt: str, *, mode: str = "speculative", drafter: str = "auto",
                 max_new_tokens: int = 64, draft_tokens: int | None = None,
                 schedule="constant", temperature: float = 0.0, top_p: float = 1.0,
                 top_k: int = 0, seed: int | None = None, chat: bool = True, stop=None,
                 stale_kv: bool = False, max_draft_tokens: int = 16):
        """Yield the engine's events for one prompt (text in, events out)."""
        from . import engine
        from .sampling import Sampling
        from .schedules import SCHEDULES, make_schedule
        from .text import Detokenizer

        if max_new_tokens < 1:
            raise UserError("Max new tokens must be at least 1.")
        if draft_tokens is not None and not 1 <= draft_tokens <= max_draft_tokens:
            raise UserError(f"Draft tokens must be between 1 and {max_draft_tokens}.")
        sampling = Sampling(temperature, top_k, top_p, seed)
        try:
            sampling.validate()
        except ValueError as e:
            raise UserError(str(e)) from None
        ids = self.encode(prompt, chat)
        common = dict(max_new_tokens=max_new_tokens, sampling=sampling,
                      eos_token_ids=self.eos_token_ids, detok=Detokenizer(self.tokenizer), stop=stop)
        if mode == "autoregressive":
            return engine.autoregressive(self.target, ids, **common)
        if mode != "speculative":
            raise UserError(f"Unknown mode {mode!r}; choose speculative or autoregressive.")
        d = self.make_drafter(drafter)
        if isinstance(schedule, str):
            if schedule not in SCHEDULES:
                raise UserError(f"Unknown schedule {schedule!r}; choose one of {', '.join(SCHEDULES)}.")
            schedule = make_schedule(schedule, initial=draft_tokens or d.default_draft_tokens,
                                     cap=max_draft_tokens)
        return engine.speculative(self.target, d, ids, schedule=schedule, stale_kv=stale_kv, **common)
