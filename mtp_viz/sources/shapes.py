"""Gemma 4's real shapes with random weights: what a step costs, before any download.

A forward's time does not depend on the values of a dense model's weights, only on their
shapes, so a target and assistant built at a checkpoint's exact shape with random weights
cost what the real pair costs per step; what they do not have is the real pair's
acceptance (their drafts are noise), which :class:`mtp_viz.engine.drafters.scripted.ScriptedDrafter`
sets instead. A mixture of experts is the exception: its router picks experts by its
weights, and a random router spreads tokens over more experts than a trained one
(:data:`MOE_NOTE`).

Where each shape comes from (``Shape.origin``):

- ``hub``: the checkpoint's own ``config.json`` (a few KB, no weights), from the local
  Hugging Face cache or, where the Hub answers at once (:func:`.presets.hub_reachable`), from the Hub;
- ``shipped``: the configs in ``mtp_viz/assets/shapes/`` (``<preset>.target.json``, the text
  model's config, and ``<preset>.assistant.json``), with the source of every number in
  ``mtp_viz/assets/shapes/SOURCES.md`` and the estimated ones marked there;
- ``folder``: a local model folder's own config (and its ``-assistant`` sibling's).

The target is the class a real checkpoint loads as (``Gemma4ForConditionalGeneration``, the
12B's ``Gemma4UnifiedForConditionalGeneration``) without its vision and audio towers, which
a text run never calls. Nothing is downloaded but a config; the memory check runs on the
configs before a byte of weights is allocated (:func:`mtp_viz.sources.memory.check_fits`).
"""
from __future__ import annotations

import json
import os
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Iterator

from mtp_viz.errors import UserError, clip
from mtp_viz.paths import assets_dir

WEIGHTS = ("real", "random")
LABEL = "random weights: timings only"   # what every view says of such a pair
MOE_NOTE = ("a random router spreads tokens over more experts than a trained one, so a random "
            "mixture of experts reads more expert weights per step than the real model")
RANDOM_PRECISIONS = ("float32", "bfloat16", "float16", "int8", "int4")
SEED = 0


def shapes_dir():
    return assets_dir() / "shapes"


def check_weights(value: Any) -> str:
    """``real`` or ``random``, or the sentence that says it is neither."""
    name = str(value or "real").strip().lower()
    if name not in WEIGHTS:
        raise UserError(f"Unknown weights {clip(str(value))}; choose real or random.")
    return name


def shipped() -> list[str]:
    """The presets whose shapes ship with the package."""
    return sorted(p.name[:-len(".target.json")] for p in shapes_dir().glob("*.target.json"))


@dataclass(frozen=True)
class Shape:
    """A pair's configs and where they came from."""
    key: str
    target: Any            # the target's transformers config (the wrapper, towers left out)
    drafter: Any | None    # the assistant's, or None
    origin: str            # "hub", "shipped" or "folder"


def _read_json(path) -> dict:
    return json.loads(path.read_text(encoding="utf-8"))


def _wrapper(text: dict) -> Any:
    """The config a real checkpoint's ``AutoModelForCausalLM`` builds from: the multimodal
    wrapper of its text model, no towers."""
    import transformers as tr
    text = {k: v for k, v in text.items() if not k.startswith("_")}
    unified = text.get("model_type") == "gemma4_unified_text"
    cls, arch = ((tr.Gemma4UnifiedConfig, "Gemma4UnifiedForConditionalGeneration") if unified
                 else (tr.Gemma4Config, "Gemma4ForConditionalGeneration"))
    return cls(text_config=text, vision_config=None, audio_config=None, architectures=[arch])


def _assistant(d: dict) -> Any:
    import transformers as tr
    d = {k: v for k, v in d.items() if not k.startswith("_")}
    cls = tr.Gemma4UnifiedAssistantConfig if d.get("model_type") == "gemma4_unified_assistant" \
        else tr.Gemma4AssistantConfig
    return cls(**{k: v for k, v in d.items() if k != "model_type"})


def _from_hub(hub_id: str, assistant: str | None) -> tuple[Any, Any] | None:
    """Both configs from the local cache, else from the Hub if it answers at once; None
    when neither has them (offline: the shipped shape is used)."""
    from transformers import AutoConfig

    from .presets import hub_reachable
    for local_only in (True, False):
        if not local_only and not hub_reachable():
            return None
        try:
            target = AutoConfig.from_pretrained(hub_id, local_files_only=local_only, trust_remote_code=False)
            drafter = AutoConfig.from_pretrained(assistant, local_files_only=local_only,
                                                 trust_remote_code=False) if assistant else None
            return target, drafter
        except Exception:  # noqa: BLE001 - not cached / not reachable: try the next place
            continue
    return None


def shape(target: str, drafter_kind: str = "auto") -> Shape:
    """The shape of ``target`` (a preset, a folder, a hub id) and its assistant
    (none for ``drafter_kind="lookup"``)."""
    from .presets import PRESETS, default_drafter, is_local, model_path, resolve
    key = target.strip().lower()
    want_drafter = drafter_kind != "lookup"
    if key in PRESETS and key != "tiny":
        hub_id, assistant = resolve(key)
        found = _from_hub(hub_id, assistant if want_drafter else None)
        if found is not None:
            return Shape(key, found[0], found[1], "hub")
        path = shapes_dir() / f"{key}.target.json"
        if not path.is_file():
            raise UserError(f"No shape of {clip(key)} ships with mtp-viz and the Hub cannot be reached; "
                            f"shapes ship for {', '.join(shipped())}.")
        drafter_path = shapes_dir() / f"{key}.assistant.json"
        return Shape(key, _wrapper(_read_json(path)),
                     _assistant(_read_json(drafter_path)) if want_drafter and drafter_path.is_file() else None,
                     "shipped")
    if key == "tiny" or is_local(target):
        from transformers import AutoConfig

        folder, sibling = (resolve("tiny") if key == "tiny" else (target, default_drafter(target)))
        try:
            config = AutoConfig.from_pretrained(model_path(folder), trust_remote_code=False)
            drafter = AutoConfig.from_pretrained(model_path(sibling), trust_remote_code=False) \
                if want_drafter and sibling else None
        except UserError:
            raise
        except Exception as err:  # noqa: BLE001 - an unreadable folder: one sentence
            raise UserError(f"There is no loadable model folder at {clip(target)}.") from err
        return Shape(key if key == "tiny" else os.path.basename(os.path.normpath(target)), config, drafter,
                     "folder")
    found = _from_hub(target, target + "-assistant" if want_drafter else None)
    if found is None:
        raise UserError(f"The shape of {clip(target)} is not in the local Hugging Face cache and the Hub "
                        f"cannot be reached; random weights need a preset ({', '.join(shipped())}), a "
                        "folder or a reachable hub id.")
    return Shape(target, found[0], found[1], "hub")


@contextmanager
def _seeded(seed: int) -> Iterator[None]:
    import torch
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        yield


def build(config: Any, precision: str, device: str, seed: int = SEED) -> Any:
    """A model of ``config``'s class and shape with transformers' own random
    initialisation, built straight in ``precision`` on ``device`` (no float32 copy first), its attention
    steadied (:func:`steady`)."""
    import torch
    from transformers import AutoModelForCausalLM

    from mtp_viz.engine.build import building

    from .precision import BITS, compute_dtype, int8_head, quant_type
    dtype = compute_dtype(precision, device)
    quant = quant_type(precision, device) if precision in BITS else None   # one sentence where it cannot run
    with building(), _seeded(seed), torch.device(device):
        model = AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16 if quant else dtype,
                                                 trust_remote_code=False)
    if quant is not None:
        quantized(model, quant, dtype)
        int8_head(model, precision)
    ordering = getattr(getattr(model, "masked_embedding", None), "token_ordering", None)
    if ordering is not None:  # the clustered head's token order: a permutation, as a real one is
        with _seeded(seed + 1):
            ordering.copy_(torch.randperm(ordering.numel()).to(ordering.dtype).reshape(ordering.shape))
    steady(model)
    no_eos(model)
    return model.eval()


def quantized(model: Any, quant: Any, dtype: Any) -> None:
    """``model`` (built in bfloat16) with torchao's ``quant`` applied to each linear layer as
    loading a checkpoint with ``TorchAoConfig`` does (the output head and tied weights kept in
    ``dtype``, as transformers keeps them; :func:`.precision.int8_head` then decides the head),
    computing in ``dtype``: one layer at a
    time widened to ``dtype`` and quantized, then every other weight widened, so a random E2B
    in int8 peaks near its bfloat16 size (9 GB) instead of its float32 one (19 GB)."""
    import torch
    from torchao.quantization import quantize_
    from transformers.quantizers.base import get_keys_to_not_convert
    keep = set(get_keys_to_not_convert(model))   # what TorchAoConfig leaves: the output head, tied weights
    for name, module in model.named_modules():
        if name not in keep and isinstance(module, torch.nn.Linear) and type(module.weight) is torch.nn.Parameter:
            module.to(dtype)
            quantize_(module, quant)
    for module in model.modules():
        for name, p in list(module.named_parameters(recurse=False)):
            if type(p) is torch.nn.Parameter and p.is_floating_point() and p.dtype != dtype:
                p.data = p.data.to(dtype)
        for name, b in list(module.named_buffers(recurse=False)):
            if b.is_floating_point() and b.dtype != dtype:
                setattr(module, name, b.to(dtype))


def steady(model: Any) -> None:
    """Give attention the temperature a trained model has. Gemma 4 normalises q and k per
    head (RMSNorm, weight 1 at initialisation) and scores them unscaled (``scaling = 1``), so a
    random model's score q·k = Σ_d q_d k_d has variance d (the head size, 256 or 512): each
    head's softmax is then all but an argmax over positions, and a rounding difference (one
    width's GEMM against another's) switches it, so the logits of a verification of 5 tokens
    and of one plain step part by ~0.6 in bfloat16 and ~4e-4 in float32 at E2B's 35 layers.
    Scaling every k-norm's weight by d^-1/2 gives the scores variance 1, as a trained
    model's learnt norms do; the float32 difference falls to ~5e-6 (a forward's cost does not
    change: the same products, other values)."""
    for name, module in model.named_modules():
        if name.endswith("k_norm") and getattr(module, "weight", None) is not None:
            module.weight.data.mul_(module.weight.numel() ** -0.5)


def no_eos(model: Any) -> None:
    """A random model has no end of text: every run goes to its token limit, so two runs of
    one setting always time the same number of tokens."""
    for cfg in (model.config, getattr(model.config, "text_config", None), getattr(model, "generation_config", None)):
        if cfg is not None and hasattr(cfg, "eos_token_id"):
            cfg.eos_token_id = None


def tokenizer(vocab_size: int) -> Any:
    """A tokenizer for a random model of ``vocab_size`` tokens: byte-level BPE (any text
    encodes, about one token per byte), ids 0-2 pad, (unused) end and begin as Gemma's, the
    bytes next, then one merge (" t", so the vocabulary has the merges llama.cpp's gpt2
    vocabulary requires), and every other id a placeholder ``<t123>`` that decodes as itself."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast
    alphabet = pre_tokenizers.ByteLevel.alphabet()
    specials = ["<pad>", "<eos>", "<bos>"]
    merges = [("Ġ", "t")]   # byte-level's space and "t"
    vocab = {tok: i for i, tok in enumerate(specials + sorted(alphabet) + ["".join(m) for m in merges])}
    vocab.update({f"<t{i}>": i for i in range(len(vocab), vocab_size)})
    tok = Tokenizer(models.BPE(vocab=vocab, merges=merges))
    # GPT-2's split before the bytes (as llama.cpp's gpt2 vocabulary splits: `mtp-viz gguf`)
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    return PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<pad>", bos_token="<bos>")



__all__ = ["LABEL", "MOE_NOTE", "WEIGHTS", "Shape", "build", "check_weights", "shape", "shipped", "steady",
           "tokenizer"]
