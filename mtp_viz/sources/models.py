"""Loading model pairs: presets, hub ids, local folders, the bundled offline pair.

``load_pair`` returns a :class:`ModelPair`, which encodes prompts (applying the chat
template of instruction models) and runs the engine. ``trust_remote_code`` is never
enabled. Every failure a user can cause becomes a one-sentence ``UserError`` that
names the model only as the user wrote it: no resolved paths, no file contents.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Callable

from mtp_viz.errors import UserError
from .presets import PRESETS, canonical, is_local, resolve

ASSISTANT_TYPES = ("gemma4_assistant", "gemma4_unified_assistant")
GEMMA4_TYPES = ("gemma4", "gemma4_text", "gemma4_unified")
PROCESSOR_FILES = ("processor_config.json", "preprocessor_config.json")
MAX_TOP = 50  # most top candidates per position a generation may record

__all__ = ["load_pair", "ModelPair", "PRESETS", "UserError", "canonical", "is_local",
           "out_of_memory"]


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


def set_threads(n: int) -> None:
    """torch's CPU threads for this process (the app chooses them once, on purpose)."""
    import torch
    torch.set_num_threads(max(1, int(n)))


def out_of_memory(err: BaseException) -> bool:
    """Whether ``err`` means memory ran out. Accelerators raise torch's typed error;
    the CPU allocator raises a plain RuntimeError, whose message is its only sign."""
    import torch
    return isinstance(err, (torch.OutOfMemoryError, MemoryError)) or (
        isinstance(err, RuntimeError) and "can't allocate memory" in str(err))


def _hub_error(err: BaseException):
    """The huggingface_hub exception behind a loading error (transformers wraps them
    in OSError), or None."""
    from huggingface_hub import errors as hub
    seen = err
    while seen is not None:
        if isinstance(seen, (hub.HfHubHTTPError, hub.LocalEntryNotFoundError, hub.HFValidationError,
                             hub.OfflineModeIsEnabled)):
            return seen
        seen = seen.__cause__ or seen.__context__
    return None


def _explain(spec: str, err: BaseException) -> UserError:
    """One sentence for a loading failure, classified by exception type."""
    from huggingface_hub import errors as hub
    if out_of_memory(err):
        return UserError(f"Not enough memory to load {spec}; try a smaller model, a GPU, or the tiny pair.")
    if is_local(spec):  # one answer for every unusable folder: no existence oracle
        return UserError(f"There is no loadable model folder at {spec}.")
    cause = _hub_error(err)
    if isinstance(cause, hub.GatedRepoError):  # a subclass of RepositoryNotFoundError: first
        return UserError(f"{spec} is gated: accept its license on the Hugging Face Hub and log in "
                         "with `hf auth login`.")
    if isinstance(cause, (hub.LocalEntryNotFoundError, hub.OfflineModeIsEnabled)):
        return UserError(f"{spec} is not in the local Hugging Face cache and cannot be downloaded "
                         "without a network connection; use the bundled tiny pair instead.")
    if isinstance(cause, (hub.RepositoryNotFoundError, hub.HFValidationError,
                          hub.RevisionNotFoundError)):
        return UserError(f"{spec} is neither a local model folder nor a model id on the Hugging Face Hub.")
    if isinstance(cause, hub.EntryNotFoundError):
        return UserError(f"{spec} is not a model repository (it has no config.json).")
    return UserError(f"{spec} could not be loaded as a model ({type(err).__name__}).")


def _path(spec: str) -> str:
    """What transformers is given: a folder's expanded path, or the hub id."""
    if is_local(spec):
        folder = Path(spec).expanduser()
        if not folder.is_dir():
            raise UserError(f"There is no loadable model folder at {spec}.")
        return str(folder)
    return spec


def _load(loader, spec: str, **kwargs):
    try:
        return loader(_path(spec), trust_remote_code=False, **kwargs)
    except UserError:
        raise
    except Exception as err:  # noqa: BLE001 - every loading failure becomes one sentence
        raise _explain(spec, err) from err


def _text_config(config):
    return config.get_text_config() if hasattr(config, "get_text_config") else config


def _default_drafter(spec: str) -> str | None:
    """Gemma 4 targets have an MTP assistant named '<target>-assistant'."""
    if is_local(spec):
        sibling = Path(spec.rstrip("/\\") + "-assistant")
        return str(sibling) if sibling.expanduser().is_dir() else None
    return spec + "-assistant"


def _drafter_spec(drafter: str) -> str:
    """A preset's name given as the drafter means that preset's drafter."""
    key = drafter.strip().lower()
    if key in PRESETS:
        preset_drafter = resolve(key)[1]
        if preset_drafter is None:
            raise UserError(f"The preset {key} has no drafter.")
        return preset_drafter
    return drafter


def load_pair(target: str, drafter: str | None = None, *, drafter_kind: str = "auto",
              device: str | None = None, dtype: str | None = None) -> "ModelPair":
    """Load a target and its drafter (or none, for prompt lookup).

    target: a preset name (``tiny``, ``e2b``, ...), a hub id or a local folder.
    drafter: a preset name (its drafter), a hub id or a folder; by default the preset's,
    or ``<target>-assistant`` for Gemma 4 targets. ``drafter_kind="lookup"`` loads no
    drafter at all. Each config is read once and handed to everything that needs it.
    """
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    if not target or not str(target).strip():
        raise UserError("No target model was given.")
    target_spec, preset_drafter = resolve(str(target).strip())
    device = pick_device(device)
    torch_dtype = pick_dtype(device, dtype)
    config = _load(AutoConfig.from_pretrained, target_spec)
    is_gemma4 = config.model_type in GEMMA4_TYPES
    if drafter_kind == "lookup":
        drafter = None
    elif drafter:
        drafter = _drafter_spec(drafter)
    else:
        drafter = preset_drafter or (_default_drafter(target_spec) if is_gemma4 else None)

    drafter_config = _load(AutoConfig.from_pretrained, drafter) if drafter else None
    if drafter_config is not None:
        if drafter_config.model_type in ASSISTANT_TYPES and not is_gemma4:
            raise UserError(f"The Gemma 4 MTP drafter {drafter} needs a Gemma 4 target, "
                            f"but {target} is not a Gemma 4 model.")
        t_text, d_text = _text_config(config), _text_config(drafter_config)
        if d_text.vocab_size != t_text.vocab_size:
            raise UserError(f"{drafter} and {target} do not share a vocabulary "
                            f"({d_text.vocab_size} vs {t_text.vocab_size} tokens).")
        backbone = getattr(drafter_config, "backbone_hidden_size", None)
        if backbone is not None and backbone != t_text.hidden_size:
            raise UserError(f"The MTP drafter {drafter} was made for a target of width {backbone}, "
                            f"but {target} has width {t_text.hidden_size}.")

    tokenizer = _load(AutoTokenizer.from_pretrained, target_spec, config=config)
    kwargs = dict(dtype=torch_dtype)
    if device != "cpu":
        kwargs["device_map"] = device
    target_model = _load(AutoModelForCausalLM.from_pretrained, target_spec, config=config,
                         **kwargs).eval()
    drafter_model = (_load(AutoModelForCausalLM.from_pretrained, drafter, config=drafter_config,
                           **kwargs).eval() if drafter else None)
    return ModelPair(target_model, drafter_model, tokenizer, str(target), drafter, device,
                     target_spec=target_spec)


@dataclass
class ModelPair:
    target: object
    drafter_model: object | None
    tokenizer: object
    name: str
    drafter_name: str | None
    device: str
    target_spec: str = ""          # what the target was loaded from (for the processor probe)
    schedules: dict = field(default_factory=dict, repr=False)  # carried across generations

    def own_time(self) -> tuple[Callable[[], float], str]:
        """The time a run of this pair is charged (``now``, basis), for
        :func:`mtp_viz.sources.interleave.interleave`. On a CPU with one torch thread every
        operation runs on the generating thread, so that thread's CPU time is the run's
        whole work (equal to wall time, to the millisecond, on an idle machine) and
        leaves out time spent waiting for a core or for the interpreter lock. Anywhere
        else (a GPU, torch's thread pool) work happens off the thread: wall time."""
        import torch
        if self.device == "cpu" and torch.get_num_threads() == 1:
            return time.thread_time, "cpu"
        return time.perf_counter, "wall"

    @property
    def has_mtp(self) -> bool:
        return self.drafter_model is not None and \
            self.drafter_model.config.model_type in ASSISTANT_TYPES

    @property
    def is_gemma4(self) -> bool:
        return self.target.config.model_type in GEMMA4_TYPES

    @property
    def context_length(self) -> int:
        """The most positions the target can attend to (prompt + generated)."""
        return int(getattr(_text_config(self.target.config), "max_position_embeddings", 0) or 0)

    @property
    def eos_token_ids(self) -> list[int]:
        ids = set()
        for src in (getattr(self.target, "generation_config", None), self.target.config,
                    self.tokenizer):
            eos = getattr(src, "eos_token_id", None)
            ids.update([eos] if isinstance(eos, int) else (eos or []))
        return sorted(ids)

    @cached_property
    def chat_template(self) -> str | None:
        """The tokenizer's chat template; multimodal Gemma 4 checkpoints may keep it with
        the processor instead, which is probed only here, on first need, and only
        where one can exist (a hub id, or a folder with processor files)."""
        template = getattr(self.tokenizer, "chat_template", None)
        if template or not self.is_gemma4 or not self.target_spec:
            return template
        if is_local(self.target_spec) and not any(
                (Path(self.target_spec).expanduser() / f).exists() for f in PROCESSOR_FILES):
            return None
        from transformers import AutoProcessor
        try:
            return getattr(AutoProcessor.from_pretrained(_path(self.target_spec), trust_remote_code=False),
                           "chat_template", None)
        except Exception:  # noqa: BLE001 - no processor simply means no chat template
            return None

    def encode(self, prompt: str, chat: bool = True) -> list[int]:
        """Prompt text → ids; instruction models get their chat template (switchable off)."""
        if not isinstance(prompt, str) or not prompt.strip():
            raise UserError("The prompt is empty.")
        try:
            prompt.encode("utf-8")
        except UnicodeEncodeError:  # lone surrogates, e.g. undecodable bytes from a shell
            raise UserError("The prompt is not valid UTF-8 text.") from None
        if chat and self.chat_template:
            ids = self.tokenizer.apply_chat_template(
                [{"role": "user", "content": prompt}], add_generation_prompt=True, tokenize=True,
                chat_template=self.chat_template)
            ids = ids["input_ids"] if isinstance(ids, dict) or hasattr(ids, "keys") else ids
            return list(ids)
        return list(self.tokenizer(prompt)["input_ids"])

    def make_drafter(self, kind: str = "auto"):
        from mtp_viz.engine.drafters import MTPDrafter, ModelDrafter, PromptLookupDrafter
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
        raise UserError(f"Unknown drafter {kind!r}; choose auto, mtp, model or lookup.")

    def schedule(self, name: str, drafter_kind: str, initial: int, cap: int):
        """This pair's schedule for these settings, created once and then reused, so an
        adaptive schedule carries what it learned into the next generation (as
        transformers keeps the heuristic's length in the assistant's config)."""
        from mtp_viz.engine.schedules import SCHEDULES, make_schedule
        if name not in SCHEDULES:
            raise UserError(f"Unknown schedule {name!r}; choose one of {', '.join(SCHEDULES)}.")
        key = (name, drafter_kind, initial, cap)
        if key not in self.schedules:
            self.schedules[key] = make_schedule(name, initial=initial, cap=cap)
        return self.schedules[key]

    def warm_up(self, tokens: int = 8) -> None:
        """A short untimed run of each mode: the first calls pay for lazy initialisation,
        which would otherwise land in the first timing a user sees."""
        for mode in ("speculative", "autoregressive"):
            for _ in self.generate("def main():\n    return", mode=mode, max_new_tokens=tokens,
                                   chat=False):
                pass

    def generate(self, prompt: str, *, mode: str = "speculative", drafter: str = "auto",
                 max_new_tokens: int = 64, draft_tokens: int | None = None,
                 schedule="constant", temperature: float = 0.0, top_p: float = 1.0,
                 top_k: int = 0, seed: int | None = None, chat: bool = True, stop=None,
                 stale_kv: bool = False, max_draft_tokens: int = 16,
                 max_prompt_tokens: int | None = None, pause=None, top: int = 0, clock=None):
        """Check every setting, then return the engine's event generator for one prompt.

        ``schedule`` is a name (this pair's schedule of that name, carried across
        generations) or a :class:`mtp_viz.engine.schedules.Schedule` the caller keeps.
        ``max_prompt_tokens`` caps the prompt (public deployments set it); ``pause`` is
        step mode's hook (see :func:`mtp_viz.engine.loop.speculative`; speculative mode only).
        ``top=k`` records each position's top-k candidates on the events (the token
        inspector's data; off by default, and the benchmarks keep it off). ``clock`` times
        the run (default ``time.perf_counter``; see :mod:`mtp_viz.sources.interleave`)."""
        from mtp_viz.engine import loop as engine
        from mtp_viz.engine.decoding import Sampling
        from mtp_viz.engine.text import Detokenizer

        if isinstance(max_new_tokens, bool) or not isinstance(max_new_tokens, int) or max_new_tokens < 1:
            raise UserError("Max new tokens must be a whole number of at least 1.")
        if draft_tokens is not None and (isinstance(draft_tokens, bool) or not isinstance(draft_tokens, int)
                                         or not 1 <= draft_tokens <= max_draft_tokens):
            raise UserError(f"Draft tokens must be a whole number between 1 and {max_draft_tokens}.")
        if mode not in ("speculative", "autoregressive"):
            raise UserError(f"Unknown mode {mode!r}; choose speculative or autoregressive.")
        if isinstance(top, bool) or not isinstance(top, int) or not 0 <= top <= MAX_TOP:
            raise UserError(f"Top candidates must be a whole number between 0 and {MAX_TOP}.")
        sampling = Sampling(temperature, top_k, top_p, seed)
        try:
            sampling.validate()
        except ValueError as e:
            raise UserError(str(e)) from None
        ids = self.encode(prompt, chat)
        if max_prompt_tokens and len(ids) > max_prompt_tokens:
            raise UserError(f"The prompt has {len(ids)} tokens; this deployment takes at most "
                            f"{max_prompt_tokens}.")
        if self.context_length and len(ids) + max_new_tokens > self.context_length:
            raise UserError(f"The prompt ({len(ids)} tokens) plus {max_new_tokens} new tokens exceeds "
                            f"the model's context of {self.context_length} tokens.")
        common = dict(max_new_tokens=max_new_tokens, sampling=sampling,
                      eos_token_ids=self.eos_token_ids, detok=Detokenizer(self.tokenizer), stop=stop,
                      top=top, **({"clock": clock} if clock else {}))
        if mode == "autoregressive":
            return _guarded(engine.autoregressive(self.target, ids, **common))
        d = self.make_drafter(drafter)
        if isinstance(schedule, str):
            schedule = self.schedule(schedule, d.kind, draft_tokens or d.default_draft_tokens,
                                     max_draft_tokens)
        return _guarded(engine.speculative(self.target, d, ids, schedule=schedule,
                                           stale_kv=stale_kv, pause=pause, **common))


def _guarded(events):
    """The engine's events, with running out of memory turned into one sentence."""
    try:
        yield from events
    except Exception as err:  # noqa: BLE001 - only memory errors are translated
        if out_of_memory(err):
            raise UserError("Ran out of memory while generating; try a shorter prompt, "
                            "fewer new tokens or a smaller model.") from err
        raise
