"""Loading model pairs: presets, hub ids, local folders, the bundled offline pair.

``load_pair`` returns a :class:`mtp_viz.sources.pair.ModelPair`, each model in its
precision (:mod:`.precision`); it reads the configs first, checks that each precision
runs on the device and refuses a pair that will not fit in memory before any weight
loads (:mod:`.memory`). ``trust_remote_code`` is never enabled. Every failure a user can
cause becomes a one-sentence ``UserError`` that names the model only as the user wrote
it: no resolved paths, no file contents.
"""
from __future__ import annotations

import copy
from contextlib import contextmanager
from typing import Iterator

from mtp_viz.engine.build import building
from mtp_viz.engine.config import text_config
from mtp_viz.errors import UserError, clip

from .local import out_of_memory
from .memory import check_fits
from .noise import quiet_known_noise
from .pair import ASSISTANT_TYPES, GEMMA4_TYPES, ModelPair
from .precision import Precision, check_loaded, int8_head, load_kwargs
from .presets import PRESETS, check_reachable, default_drafter, is_local, model_path, resolve

__all__ = ["check_pair", "drafter_spec", "explain_load_error", "from_models", "load_pair", "load_pairs", "random_pairs",
           "out_of_memory", "pick_device", "pinned_threads", "set_threads"]


def pick_device(device: str | None = None) -> str:
    import torch
    if device:
        return device
    if torch.cuda.is_available():
        return "cuda"
    if getattr(torch.backends, "mps", None) and torch.backends.mps.is_available():
        return "mps"
    return "cpu"


def default_threads() -> int:
    """torch CPU threads every front end decodes with unless told (``MTP_VIZ_THREADS``):
    one core less than this machine has (left to the web server, a progress bar, the OS),
    at most 8, at least 1. The app, ``mtp-viz generate`` and ``mtp-viz bench`` all use it,
    so one setup is timed the same way everywhere."""
    import os
    try:
        n = int(os.environ.get("MTP_VIZ_THREADS", ""))
    except ValueError:
        n = 0
    return n if n > 0 else max(1, min(8, (os.cpu_count() or 2) - 1))


@contextmanager
def pinned_threads(n: int | None = None) -> Iterator[int]:
    """torch's CPU threads set to ``n`` (default :func:`default_threads`) for a block, then
    put back: how a notebook's run is timed as the app times it, without keeping the
    notebook's torch changed."""
    import torch
    before = torch.get_num_threads()
    torch.set_num_threads(max(1, int(n or default_threads())))
    try:
        yield torch.get_num_threads()
    finally:
        torch.set_num_threads(before)


def set_threads(n: int) -> None:
    """torch's CPU threads for this process (the app chooses them once, on purpose)."""
    import torch
    torch.set_num_threads(max(1, int(n)))


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


def explain_load_error(spec: str, err: BaseException) -> UserError:
    """One sentence for a loading failure, classified by exception type; the model is
    named as written, cut to a short prefix (:func:`clip`)."""
    from huggingface_hub import errors as hub
    name = clip(spec)
    if out_of_memory(err):
        return UserError(f"Not enough memory to load {name}; try a smaller model, a GPU, or the tiny pair.")
    if is_local(spec):  # one answer for every unusable folder: no existence oracle
        return UserError(f"There is no loadable model folder at {name}.")
    cause = _hub_error(err)
    if isinstance(cause, hub.GatedRepoError):  # a subclass of RepositoryNotFoundError: first
        return UserError(f"{name} is gated: accept its license on the Hugging Face Hub and log in "
                         "with `hf auth login`.")
    if isinstance(cause, (hub.LocalEntryNotFoundError, hub.OfflineModeIsEnabled)):
        return UserError(f"{name} is not in the local Hugging Face cache and cannot be downloaded "
                         "without a network connection; use the bundled tiny pair instead.")
    if isinstance(cause, (hub.RepositoryNotFoundError, hub.HFValidationError,
                          hub.RevisionNotFoundError)):
        return UserError(f"{name} is neither a local model folder nor a model id on the Hugging Face Hub.")
    if isinstance(cause, hub.EntryNotFoundError):
        return UserError(f"{name} is not a model repository (it has no config.json).")
    return UserError(f"{name} could not be loaded as a model ({type(err).__name__}).")


def _load(loader, spec: str, **kwargs):
    try:
        return loader(model_path(spec), trust_remote_code=False, **kwargs)
    except UserError:
        raise
    except Exception as err:  # noqa: BLE001 - every loading failure becomes one sentence
        raise explain_load_error(spec, err) from err



def drafter_spec(drafter: str) -> str:
    """A preset's name given as the drafter means that preset's drafter."""
    key = drafter.strip().lower()
    if key in PRESETS:
        preset_drafter = resolve(key)[1]
        if preset_drafter is None:
            raise UserError(f"The preset {clip(key)} has no drafter.")
        return preset_drafter
    return drafter


def load_pair(target: str, drafter: str | None = None, *, drafter_kind: str = "auto",
              device: str | None = None, dtype: str | None = None, target_precision: str | None = None,
              drafter_precision: str | None = None, compile: bool = False, progress=None,
              weights: str = "real", engine: str | None = None) -> "ModelPair":
    """Load a target and its drafter (or none, for prompt lookup).

    target: a preset name (``tiny``, ``e2b``, ...), a hub id or a local folder.
    drafter: a preset name (its drafter), a hub id or a folder; by default the preset's,
    or ``<target>-assistant`` for Gemma 4 targets. ``drafter_kind="lookup"`` loads no
    drafter at all. Each config is read once and handed to everything that needs it.
    ``target_precision`` / ``drafter_precision``: float32, bfloat16, float16, int8 or int4
    (:mod:`.precision`); ``dtype`` sets both, and each model's own setting wins over it;
    unset, float32 on a CPU and bfloat16 on a GPU. ``engine``: a name of
    :data:`mtp_viz.engine.engines.ENGINES` (default eager; ``compile=True``, its alias:
    ``engine="compiled"``), put on by :meth:`ModelPair.use` (an engine that compiles: its
    graphs compiled now, ``pair.compile_seconds``, or eager decoding with the one sentence
    of ``pair.compile_note`` saying why not); ``progress`` hears of each graph before it
    compiles (:class:`mtp_viz.engine.graphs.Progress`).
    ``weights="random"``: the target's real shape (a preset's, a folder's or a hub id's
    config) with random weights, nothing downloaded but a config (:mod:`.shapes`): its
    timings are the real pair's, its text and acceptance are not.
    """
    from mtp_viz.engine.engines import default_engine, resolve
    precision = Precision.of(dtype, target_precision, drafter_precision)  # names checked before any load
    name = resolve(engine, compile)                                         # and the engine's
    pair = load_pairs(target, drafter, [precision], drafter_kind=drafter_kind, device=device, weights=weights)[0]
    if name != default_engine():   # a pair loads on the default engine
        pair.use(name, progress=progress)
    return pair


def load_pairs(target: str, drafter: str | None = None, precisions=(Precision(),), *,
               drafter_kind: str = "auto", device: str | None = None, weights: str = "real") -> list["ModelPair"]:
    """One pair per :class:`.precision.Precision` of ``precisions``, in their order, each
    distinct model in each distinct precision loaded once and shared (the bench's
    ``--precisions``): float32/float32 and float32/int8 hold one float32 target.
    ``weights="random"``: built at the target's real shape instead (:mod:`.shapes`)."""
    quiet_known_noise()  # before transformers imports torchao: its two notices are nobody's to act on
    with building():  # transformers' lazy first import is not safe from two threads at once
        from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    if not target or not str(target).strip():
        raise UserError("No target model was given.")
    from .shapes import check_weights
    if check_weights(weights) == "random":
        if drafter:
            raise UserError("With random weights the drafter is the target's own assistant, at its real shape; "
                            "leave out the drafter.")
        device = pick_device(device)
        return random_pairs(str(target), [p.resolved(device) for p in precisions], drafter_kind=drafter_kind,
                            device=device)
    check_reachable(str(target))
    target_spec, preset_drafter = resolve(str(target).strip())
    device = pick_device(device)
    precisions = [p.resolved(device) for p in precisions]
    config = _load(AutoConfig.from_pretrained, target_spec)
    if drafter_kind == "lookup":
        drafter = None
    elif drafter:
        drafter = drafter_spec(drafter)
    else:
        drafter = preset_drafter or (default_drafter(target_spec) if config.model_type in GEMMA4_TYPES else None)
    drafter_config = _load(AutoConfig.from_pretrained, drafter) if drafter else None
    check_pair(config, drafter_config, str(target), drafter)
    # what to load: (spec, config, precision) once each; every precision checked to run
    # here (one sentence if not), then the memory check, before any weights load
    wanted = list(dict.fromkeys([(target_spec, p.target) for p in precisions]
                                + ([(drafter, p.drafter) for p in precisions] if drafter else [])))
    configs = {target_spec: config, drafter: drafter_config}
    kwargs = {w: load_kwargs(w[1], device) for w in wanted}
    check_fits(str(target) if is_local(target_spec) else target_spec,
               [(configs[spec], p) for spec, p in wanted], device)
    placed = {"device_map": device} if device != "cpu" else {}
    with building():  # one build at a time in the process (see engine.build)
        tokenizer = _load(AutoTokenizer.from_pretrained, target_spec, config=config)
        # a config of its own per load: a quantized load writes its quantization_config into it
        models = {w: _load(AutoModelForCausalLM.from_pretrained, w[0], config=copy.deepcopy(configs[w[0]]),
                           **kwargs[w], **placed).eval() for w in wanted}
    for (spec, p), model in models.items():  # never a pair that says one precision and holds another
        int8_head(model, p)
        check_loaded(model, p, device, str(target) if spec == target_spec else str(drafter))
    return [ModelPair(models[(target_spec, p.target)], models[(drafter, p.drafter)] if drafter else None,
                      tokenizer, str(target), drafter, device, target_spec=target_spec) for p in precisions]


def check_pair(config, drafter_config, target: str, drafter: str | None) -> None:
    """One sentence if the drafter cannot serve the target: an MTP assistant for a
    model that is not Gemma 4, another vocabulary, or an assistant made for another
    width (it reads the target's last hidden state). Names as the user gave them."""
    if config.model_type in ASSISTANT_TYPES:   # the two swapped: the assistant given as the target
        raise UserError(f"{clip(target)} is a Gemma 4 MTP assistant, the drafter: give the model it drafts for "
                        "as the target and the assistant as the drafter (from_models(target_model, "
                        "assistant_model, processor)).")
    if drafter_config is None:
        return
    if drafter_config.model_type in ASSISTANT_TYPES and config.model_type not in GEMMA4_TYPES:
        raise UserError(f"The Gemma 4 MTP drafter {clip(drafter)} needs a Gemma 4 target, "
                        f"but {clip(target)} is not a Gemma 4 model.")
    t_text, d_text = text_config(config), text_config(drafter_config)
    if d_text.vocab_size != t_text.vocab_size:
        raise UserError(f"{clip(drafter)} and {clip(target)} do not share a vocabulary "
                        f"({d_text.vocab_size} vs {t_text.vocab_size} tokens).")
    backbone = getattr(drafter_config, "backbone_hidden_size", None)
    if backbone is not None and backbone != t_text.hidden_size:
        raise UserError(f"The MTP drafter {clip(drafter)} was made for a target of width {backbone}, "
                        f"but {clip(target)} has width {t_text.hidden_size}.")


def from_models(target, drafter=None, processor=None) -> ModelPair:
    """A pair over models already in memory (a notebook's ``target_model`` and
    ``assistant_model``), on whatever device, dtype and device map they were loaded
    with: nothing is copied, moved or loaded again.

    ``drafter``: a Gemma 4 MTP assistant, an independent draft model with the same
    vocabulary, or None (prompt lookup). ``processor``: the ``AutoProcessor`` (its chat
    template is used for chat prompts) or the tokenizer; by default the tokenizer is
    loaded from where the target came from."""
    for role, model in (("target", target), ("drafter", drafter)):
        if (model is not None or role == "target") and not (hasattr(model, "config") and hasattr(model, "generate")):
            raise UserError(f"from_models needs the {role} model itself (a transformers model), "
                            f"not {type(model).__name__}.")
    name = getattr(target.config, "_name_or_path", "") or type(target).__name__
    drafter_name = (getattr(drafter.config, "_name_or_path", "") or type(drafter).__name__) if drafter else None
    check_pair(target.config, drafter.config if drafter is not None else None, name, drafter_name)
    if processor is None:
        if not getattr(target.config, "_name_or_path", ""):
            raise UserError("from_models needs the processor or tokenizer for a target that was not "
                            "loaded from a folder or the Hub.")
        from transformers import AutoTokenizer
        processor = _load(AutoTokenizer.from_pretrained, name)
    tokenizer = getattr(processor, "tokenizer", processor)  # a processor holds its tokenizer
    if not (callable(tokenizer) and hasattr(tokenizer, "decode")):
        raise UserError(f"from_models needs the processor or tokenizer as its third argument, "
                        f"not {type(processor).__name__}.")
    template = getattr(processor, "chat_template", None) or getattr(tokenizer, "chat_template", None)
    return ModelPair(target, drafter, tokenizer, name, drafter_name, str(target.device), template=template)


def random_pairs(target: str, precisions: list, *, drafter_kind: str = "auto", device: str = "cpu",
                 seed: int | None = None) -> list:
    """One :class:`~.pair.ModelPair` per precision at ``target``'s real shape with random
    weights (``pair.weights == "random"``), each distinct model built once and shared;
    refused in one sentence, before anything is allocated, if it would not fit."""
    from .shapes import RANDOM_PRECISIONS, SEED, build, shape, tokenizer
    seed = SEED if seed is None else seed
    for p in precisions:
        for role, name in (("target", p.target), ("drafter", p.drafter)):
            if name not in RANDOM_PRECISIONS:
                raise UserError(f"Random weights come in {', '.join(RANDOM_PRECISIONS)}; give the {role} one of "
                                f"those instead of {name}.")
    s = shape(target, drafter_kind)
    check_pair(s.target, s.drafter, target, f"{target}-assistant" if s.drafter is not None else None)
    wanted = list(dict.fromkeys([("target", p.target) for p in precisions]
                                + ([("drafter", p.drafter) for p in precisions] if s.drafter is not None else [])))
    configs = {"target": s.target, "drafter": s.drafter}
    check_fits(f"{clip(target)} with random weights", [(configs[role], p) for role, p in wanted], device)
    models = {w: build(configs[w[0]], w[1], device, seed) for w in wanted}
    tok = tokenizer(text_config(s.target).vocab_size)
    name = target.strip()
    return [ModelPair(models[("target", p.target)],
                      models[("drafter", p.drafter)] if s.drafter is not None else None, tok, name,
                      f"{name}-assistant" if s.drafter is not None else None, device, weights="random",
                      shape_origin=s.origin) for p in precisions]
