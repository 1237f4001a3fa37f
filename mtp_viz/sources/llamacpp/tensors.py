"""A Gemma 4 checkpoint's tensors as llama.cpp names and stores them.

The names are what llama.cpp's own converter (``convert_hf_to_gguf.py``, class
``Gemma4Model`` / ``Gemma4AssistantModel``) writes, tensor for tensor, so that a stock
llama.cpp finds every tensor it creates for ``gemma4`` and ``gemma4-assistant``. Shapes are
kept as they are: GGUF lists dimensions in the reverse of torch's order, and the writer
reverses them itself. Tensors are read one at a time from the safetensors files (a 31B
checkpoint does not fit in memory twice).
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from mtp_viz.errors import UserError, clip

# the text model's tensors, after the wrapper's prefix: HF suffix -> GGUF name
GLOBAL = {
    "embed_tokens.weight": "token_embd.weight",
    "embed_tokens_per_layer.weight": "per_layer_token_embd.weight",   # E2B/E4B's per-layer embeddings
    "per_layer_model_projection.weight": "per_layer_model_proj.weight",
    "per_layer_projection_norm.weight": "per_layer_proj_norm.weight",
    "norm.weight": "output_norm.weight",
    "lm_head.weight": "output.weight",                                # only when not tied
    # the assistant's projections from [target embedding, target hidden state] and back
    "pre_projection.weight": "nextn.pre_projection.weight",
    "post_projection.weight": "nextn.post_projection.weight",
}
LAYER = {
    "input_layernorm.weight": "attn_norm.weight",
    "self_attn.q_proj.weight": "attn_q.weight",
    "self_attn.k_proj.weight": "attn_k.weight",
    "self_attn.v_proj.weight": "attn_v.weight",     # absent where keys are values (attention_k_eq_v)
    "self_attn.o_proj.weight": "attn_output.weight",
    "self_attn.q_norm.weight": "attn_q_norm.weight",
    "self_attn.k_norm.weight": "attn_k_norm.weight",
    "post_attention_layernorm.weight": "post_attention_norm.weight",
    "pre_feedforward_layernorm.weight": "ffn_norm.weight",
    "mlp.gate_proj.weight": "ffn_gate.weight",
    "mlp.up_proj.weight": "ffn_up.weight",
    "mlp.down_proj.weight": "ffn_down.weight",
    "post_feedforward_layernorm.weight": "post_ffw_norm.weight",
    "layer_scalar": "layer_output_scale.weight",
    # per-layer embeddings (E2B/E4B)
    "per_layer_input_gate.weight": "inp_gate.weight",
    "per_layer_projection.weight": "proj.weight",
    "post_per_layer_input_norm.weight": "post_norm.weight",
    # the mixture of experts (26B-A4B), beside the dense MLP that acts as its shared expert
    "router.proj.weight": "ffn_gate_inp.weight",
    "router.scale": "ffn_gate_inp.scale",
    "router.per_expert_scale": "ffn_down_exps.scale",
    "experts.gate_up_proj": "ffn_gate_up_exps.weight",   # [experts, 2 × ff, hidden]: gate rows, then up
    "experts.down_proj": "ffn_down_exps.weight",
    "pre_feedforward_layernorm_2.weight": "pre_ffw_norm_2.weight",
    "post_feedforward_layernorm_1.weight": "post_ffw_norm_1.weight",
    "post_feedforward_layernorm_2.weight": "post_ffw_norm_2.weight",
}
# Where the text model sits inside each class's checkpoint (the multimodal wrappers hold it
# under model.language_model). The towers beside it (vision, audio and their embedders) are
# not the text model: they stay out, as llama.cpp's converter leaves them out of this file.
TEXT_PREFIXES = ("model.language_model.", "model.")
TOWERS = ("vision_tower", "audio_tower", "embed_vision", "embed_audio")
# The E2B/E4B assistant's clustered head: llama.cpp's converter leaves it out (the drafter
# there scores the whole vocabulary with the tied embedding), and so does this writer.
SKIPPED = ("masked_embedding.",)
LAYER_NAME = re.compile(r"layers\.(\d+)\.(.+)")


@dataclass(frozen=True)
class Tensor:
    name: str            # the GGUF name
    shape: tuple         # torch's order
    load: Callable       # () -> a float32 numpy array


def gguf_name(hf_name: str) -> str | None:
    """The GGUF name of a checkpoint tensor: None for one llama.cpp does not read, "" for
    a text-model tensor it has no name for."""
    if hf_name.startswith(SKIPPED):
        return None
    rest = next((hf_name[len(p):] for p in TEXT_PREFIXES if hf_name.startswith(p)), hf_name)
    if rest.split(".")[0] in TOWERS:
        return None
    if rest in GLOBAL:
        return GLOBAL[rest]
    m = LAYER_NAME.fullmatch(rest)
    if m and m.group(2) in LAYER:
        return f"blk.{m.group(1)}.{LAYER[m.group(2)]}"
    return ""


def weight_files(folder: Path, spec: str) -> list[Path]:
    """The checkpoint's safetensors files (one, or the shards its index names)."""
    index = folder / "model.safetensors.index.json"
    if index.is_file():
        shards = sorted(set(json.loads(index.read_text(encoding="utf-8"))["weight_map"].values()))
        return [folder / s for s in shards]
    files = sorted(folder.glob("*.safetensors"))
    if not files:
        raise UserError(f"{clip(spec)} has no safetensors weights to write as GGUF.")
    return files


def read_tensors(folder: Path, spec: str) -> list[Tensor]:
    """Every tensor llama.cpp reads, named for it, each loaded only when asked for. Every
    file's header is read here, so that weights that cannot be read are one sentence before
    anything is written."""
    from safetensors import safe_open

    out, unknown = [], []
    try:
        files = weight_files(folder, spec)
    except (OSError, ValueError, KeyError, TypeError):   # an index that is no index of shards
        raise unreadable(spec, "model.safetensors.index.json") from None
    for path in files:
        try:
            with safe_open(str(path), framework="pt") as f:
                keys = [(key, gguf_name(key), tuple(f.get_slice(key).get_shape())) for key in f.keys()]
        except Exception:  # noqa: BLE001 - safetensors' own errors, a missing shard: one sentence
            raise unreadable(spec, path.name) from None
        for key, name, shape in keys:
            if name is None:
                continue
            if name == "":
                unknown.append(key)
                continue
            out.append(Tensor(name, shape, _loader(path, key, spec)))
    if unknown:
        raise UserError(f"{clip(spec)} has a tensor llama.cpp's Gemma 4 models do not read "
                        f"({clip(unknown[0], 60)}), so it cannot be written as GGUF.")
    return out


def unreadable(spec: str, file: str) -> UserError:
    return UserError(f"{clip(spec)} has weights that cannot be read ({clip(file, 60)} is no whole safetensors "
                     "file), so nothing was written.")


def check_shapes(tensors: list[Tensor], text, spec: str) -> None:
    """One sentence where a model's config.json and its weights disagree (the writer takes the
    config's sizes as the file's hyperparameters, and llama.cpp the weights' shapes): the
    embedding is vocab_size × hidden_size, every layer of num_hidden_layers is there, and
    reads hidden_size wide."""
    shapes = {t.name: t.shape for t in tensors}
    embed = shapes.get("token_embd.weight")
    said = f"{clip(spec)}'s config.json"
    if embed is None or len(embed) != 2:
        raise UserError(f"{clip(spec)} has no token embedding to write, so nothing was written.")
    if embed != (text.vocab_size, text.hidden_size):
        raise UserError(f"{said} says {text.vocab_size} tokens of width {text.hidden_size}, but its embedding "
                        f"holds {embed[0]} of width {embed[1]}, so nothing was written.")
    layers = {int(n.split(".")[1]) for n in shapes if n.startswith("blk.")}
    if layers != set(range(text.num_hidden_layers)):
        raise UserError(f"{said} says {text.num_hidden_layers} layers, but its weights hold {len(layers)}, "
                        "so nothing was written.")
    for i in range(text.num_hidden_layers):
        for part in ("attn_q", "ffn_gate"):
            shape = shapes.get(f"blk.{i}.{part}.weight")
            if shape is None or shape[-1] != text.hidden_size or f"blk.{i}.attn_q_norm.weight" not in shapes:
                raise UserError(f"{said} and its weights disagree about layer {i} (width {text.hidden_size}), "
                                "so nothing was written.")


def check_drafter(target: list[Tensor], drafter: list[Tensor], target_spec: str, drafter_spec: str) -> None:
    """One sentence where the assistant's weights do not fit the target's: the same vocabulary,
    and projections from and to the target's width (its embedding and hidden state, joined)."""
    t = {x.name: x.shape for x in target}
    d = {x.name: x.shape for x in drafter}
    vocab, width = t["token_embd.weight"]
    if d["token_embd.weight"][0] != vocab:
        raise UserError(f"{clip(drafter_spec)}'s weights hold {d['token_embd.weight'][0]} tokens and "
                        f"{clip(target_spec)}'s {vocab}, so nothing was written.")
    pre, post = d.get("nextn.pre_projection.weight"), d.get("nextn.post_projection.weight")
    if pre is None or post is None or pre[-1] != 2 * width or post[0] != width:
        raise UserError(f"{clip(drafter_spec)}'s weights were not made for a target of width {width} like "
                        f"{clip(target_spec)}, so nothing was written.")


def _loader(path: Path, key: str, spec: str) -> Callable:
    def load():
        from safetensors import safe_open
        try:
            with safe_open(str(path), framework="pt") as f:  # bfloat16 has no numpy type: torch reads it
                return f.get_tensor(key).float().numpy()
        except Exception:  # noqa: BLE001 - a file changed or cut since its header was read
            raise unreadable(spec, path.name) from None
    return load
