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
    """Every tensor llama.cpp reads, named for it, each loaded only when asked for."""
    from safetensors import safe_open

    out, unknown = [], []
    for path in weight_files(folder, spec):
        with safe_open(str(path), framework="pt") as f:
            for key in f.keys():
                name = gguf_name(key)
                if name is None:
                    continue
                if name == "":
                    unknown.append(key)
                    continue
                shape = tuple(f.get_slice(key).get_shape())
                out.append(Tensor(name, shape, _loader(path, key)))
    if unknown:
        raise UserError(f"{clip(spec)} has a tensor llama.cpp's Gemma 4 models do not read "
                        f"({clip(unknown[0], 60)}), so it cannot be written as GGUF.")
    return out


def _loader(path: Path, key: str) -> Callable:
    def load():
        from safetensors import safe_open
        with safe_open(str(path), framework="pt") as f:  # bfloat16 has no numpy type: torch reads it
            return f.get_tensor(key).float().numpy()
    return load
