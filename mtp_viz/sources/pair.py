"""A loaded target and its drafter: what they are, how prompts become ids, which
drafters they can build. Running them is the local source's job
(:mod:`mtp_viz.sources.local`); loading them, :mod:`mtp_viz.sources.models`'; a processor's chat
template, :mod:`mtp_viz.sources.chat`'; compiling them, :mod:`mtp_viz.sources.compiling`'.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from mtp_viz.engine.config import text_config
from mtp_viz.engine.drafters import DRAFTERS, drafter_class
from mtp_viz.engine.schedules import ScheduleCache
from mtp_viz.errors import UserError, clip

from .presets import display_name, is_local
from .settings import RunSettings, check_drafter

ASSISTANT_TYPES = ("gemma4_assistant", "gemma4_unified_assistant")
GEMMA4_TYPES = ("gemma4", "gemma4_text", "gemma4_unified", "gemma4_unified_text")  # wrappers and text-only



@dataclass
class ModelPair:
    target: Any
    drafter_model: Any | None
    tokenizer: Any
    name: str
    drafter_name: str | None
    device: str
    target_spec: str = ""          # what the target was loaded from (for the processor probe)
    template: str | None = None    # a chat template given with the models (from_models' processor)
    schedules: ScheduleCache = field(default_factory=ScheduleCache, repr=False)  # across generations
    # its engine (engine.decoder.Mounted) once :meth:`use` put it on one; None: eager, as loaded
    mounted: Any = field(default=None, repr=False)
    # "random": built at a real checkpoint's shape with random weights (:mod:`.shapes`): its
    # timings are the real pair's, its text and acceptance are noise; shape_origin: where
    # that shape came from ("hub", "shipped", "folder")
    weights: str = "real"
    shape_origin: str = ""

    @property
    def engine(self) -> str:
        """What decodes this pair, a name of :data:`mtp_viz.engine.engines.ENGINES`: the
        one :meth:`use` put it on, or eager (as loaded, or where that engine fell back)."""
        return self.decoder.ran.engine

    @property
    def decoder(self):
        """What the engine's loop runs as the target (:class:`mtp_viz.engine.decoder.Decoder`):
        its engine's once :meth:`use` ran, else the eager one."""
        from mtp_viz.engine.decoder import EagerDecoder
        return self.mounted.decoder if self.mounted is not None else EagerDecoder(self.target)

    def use(self, engine: str, mode: str | None = None, settings=(), progress=None) -> str:
        """Put this pair on ``engine``, a name of engine.engines.ENGINES, compiling (where it
        compiles) the graphs ``settings`` need (:func:`mtp_viz.sources.compiling.use_engine`):
        "" when it runs there, else the one sentence saying why decoding stays eager."""
        from .compiling import use_engine
        return use_engine(self, engine, mode, settings, progress)

    def on(self, engine: str, mode: str | None = None, settings=(), progress=None) -> "ModelPair":
        """The same models as a pair of its own on ``engine``, put there now
        (:func:`mtp_viz.sources.compiling.engine_copy`); this one stays as it is."""
        from .compiling import engine_copy
        return engine_copy(self, engine, mode, settings, progress)

    # What :attr:`mounted` holds, read through it for the callers that name them: the MTP drafter's
    # step (None: its eager one), what compiling took (wall seconds) and why it fell back ("" where it did not).
    draft_step = property(lambda self: getattr(self.mounted, "draft_step", None))
    compile_seconds = property(lambda self: getattr(self.mounted, "seconds", 0.0))
    compile_note = property(lambda self: getattr(self.mounted, "note", ""))

    @property
    def weights_label(self) -> str:
        """"random weights: timings only" for a random pair (:data:`.shapes.LABEL`), else ""."""
        from .shapes import LABEL
        return LABEL if self.weights == "random" else ""

    @property
    def target_id(self) -> str:
        """The target's name for display: a preset or hub id as the user gave it, a folder
        by its own name (:func:`.presets.display_name`: a server path is never shown)."""
        return display_name(self.name)

    @property
    def drafter_id(self) -> str:
        """The drafter's name as the user gave it, for display; "" for none, and for a
        folder (the app may have resolved it itself: a server path is never shown)."""
        return "" if not self.drafter_name or is_local(self.drafter_name) else self.drafter_name

    @property
    def has_mtp(self) -> bool:
        return self.drafter_model is not None and \
            self.drafter_model.config.model_type in ASSISTANT_TYPES

    @property
    def is_gemma4(self) -> bool:
        return self.target.config.model_type in GEMMA4_TYPES

    @property
    def is_moe(self) -> bool:
        """Whether the target is a mixture of experts (Gemma 4's ``enable_moe_block``)."""
        return bool(getattr(text_config(self.target.config), "enable_moe_block", False))

    @property
    def context_length(self) -> int:
        """The most positions the target can attend to (prompt + generated)."""
        return int(getattr(text_config(self.target.config), "max_position_embeddings", 0) or 0)

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
        template = self.template or getattr(self.tokenizer, "chat_template", None)
        if template or not self.is_gemma4 or not self.target_spec:
            return template
        from .chat import processor_chat_template
        return processor_chat_template(self.target_spec)

    def encode(self, prompt: str | list, chat: bool = True) -> list[int]:
        """Prompt text (or a chat: a list of messages) → ids; instruction models get
        their chat template (switchable off for text)."""
        RunSettings(prompt).validate()   # the prompt's checks, one sentence each
        messages = prompt if isinstance(prompt, list) else [{"role": "user", "content": prompt}]
        if (chat or isinstance(prompt, list)) and self.chat_template:
            ids = self.tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True,
                                                     chat_template=self.chat_template)
            ids = ids["input_ids"] if isinstance(ids, dict) or hasattr(ids, "keys") else ids
            return list(ids)
        text = "\n\n".join(m["content"] for m in messages)
        return list(self.tokenizer(text)["input_ids"])

    @cached_property
    def precision(self) -> dict[str, str | None]:
        """What each model runs in, read from the models themselves (a dtype's name, or a
        quantization's kind such as ``int8``): ``{"target": ..., "drafter": ... or None}``."""
        from .precision import precision_of
        return {"target": precision_of(self.target),
                "drafter": precision_of(self.drafter_model) if self.drafter_model is not None else None}

    @property
    def loaded(self) -> str:
        """What this pair drafts with: "assistant", "model" or "" (see engine.drafters)."""
        return "assistant" if self.has_mtp else ("model" if self.drafter_model is not None else "")

    def make_drafter(self, kind: str = "auto"):
        """A drafter of this name (engine.drafters.DRAFTERS), or the one the loaded
        models suit ("auto"): the MTP assistant, an independent draft model, else lookup."""
        if kind == "auto":
            kind = next(name for name, d in DRAFTERS.items() if d.needs == self.loaded)
        check_drafter(kind)
        entry = DRAFTERS[kind]
        if entry.needs and entry.needs != self.loaded:
            raise UserError(entry.missing.format(target=clip(self.name)))
        return drafter_class(kind).build(self.target, self.drafter_model, step=self.draft_step)

    def generate(self, prompt: str | list, *, mode: str = "speculative", drafter: str = "auto",
                 max_new_tokens: int = 64, draft_tokens: int | None = None, schedule: Any = "constant",
                 temperature: float = 0.0, top_p: float = 1.0, top_k: int = 0, seed: int | None = None,
                 chat: bool = True, stop=None, stale_kv: bool = False, max_prompt_tokens: int | None = None,
                 pause=None, top: int = 0, experts: bool = False, clock=None):
        """Check every setting (:meth:`RunSettings.validate`), then return the engine's
        event generator for one prompt in one mode (the Python API; the app and the CLI
        go through :class:`mtp_viz.sources.local.LocalSource`).

        ``schedule`` is a name (this pair's schedule of that name, carried across
        generations) or a :class:`mtp_viz.engine.schedules.Schedule` the caller keeps.
        ``pause`` is step mode's hook (speculative mode only); ``top=k`` records each
        position's top-k candidates; ``experts=True`` (a mixture-of-experts target only) each
        step's distinct experts per layer (``Step.experts_per_layer``); ``clock`` times the
        run (default ``time.perf_counter``)."""
        from mtp_viz.engine.decoding import Sampling

        from .local import run_mode
        named = isinstance(schedule, str)
        s = RunSettings(prompt, (mode,), drafter, max_new_tokens, draft_tokens,
                        schedule if named else "constant", Sampling(temperature, top_k, top_p, seed),
                        chat, top, stale_kv, max_prompt_tokens, experts).validate()
        return run_mode(self, s, mode, clock=clock, stop=stop, pause=pause,
                        schedule=None if named else schedule)

    def compare(self, prompt: str | list, *, drafter: str = "auto", max_new_tokens: int = 64,
                draft_tokens: int | None = None, schedule: str = "constant", temperature: float = 0.0,
                top_p: float = 1.0, top_k: int = 0, seed: int | None = None, chat: bool = True, stop=None,
                stale_kv: bool = False, top: int = 0):
        """Speculative decoding and its plain baseline on one prompt, taking turns on this
        thread, each on its own clock, as the app's Run times them
        (:func:`mtp_viz.sources.local.runs`): ``(mode, event)`` in the order they happen.
        Takes :meth:`generate`'s settings (a schedule by name)."""
        from mtp_viz.engine.decoding import Sampling

        from .local import runs
        s = RunSettings(prompt, ("speculative", "autoregressive"), drafter, max_new_tokens, draft_tokens,
                        schedule, Sampling(temperature, top_k, top_p, seed), chat, top, stale_kv).validate()
        return runs(self, s, stop)


__all__ = ["ASSISTANT_TYPES", "GEMMA4_TYPES", "ModelPair"]
