"""A Gemma 4 pair as GGUF files for llama.cpp: ``target.gguf`` (architecture ``gemma4``) and
``drafter.gguf`` (``gemma4-assistant``), for ``llama-server -m target.gguf -md drafter.gguf
--spec-type draft-mtp``.

Written with the ``gguf`` package (PyPI), not by llama.cpp's converter, so that no llama.cpp
source is needed; what is written is what that converter writes for the real checkpoints
(``Gemma4Model``, ``Gemma4AssistantModel``): the same keys, tensor names (:mod:`.tensors`) and
storage types. Two things are read differently, so that every Gemma 4 model mtp-viz loads
comes out right, the bundled pair included:

- each layer's head size and K/V heads come from its weights (its ``q_norm`` and ``k_proj``),
  not from the config: transformers 5 writes a ``per_layer_config`` that leaves out a
  full-attention layer's head size when it equals ``head_dim``, and the converter's
  ``assert head_dim_full is not None`` stops there;
- the tokenizer is written as llama.cpp tokenizes it (:mod:`.vocab`), a GPT-2-style one
  included. Both files carry the target's tokenizer: llama.cpp checks that the drafter's
  vocabulary is the target's.

Tensors are read and written one at a time, so a checkpoint never sits in memory whole.

A pair or nothing: both folders are checked before a byte is written (readable weights,
config.json against the weights' shapes, the assistant against the target:
:mod:`.tensors`), both files are written under temporary names and moved into place only
once both are whole, and an existing pair is replaced only when asked (``force``).
"""
from __future__ import annotations

import math
import os
from dataclasses import dataclass, field
from pathlib import Path

from mtp_viz.engine.config import text_config
from mtp_viz.errors import UserError, clip

from ..models import check_pair, drafter_spec, explain_load_error
from ..pair import ASSISTANT_TYPES, GEMMA4_TYPES
from ..presets import default_drafter, is_local, model_path, resolve
from . import tensors as tensors_, vocab

# --outtype -> (general.file_type, the storage type of the weights that get quantized)
OUTTYPES = {"f32": ("ALL_F32", "F32"), "f16": ("MOSTLY_F16", "F16"),
            "bf16": ("MOSTLY_BF16", "BF16"), "q8_0": ("MOSTLY_Q8_0", "Q8_0")}
HUB_FILES = ["*.json", "*.safetensors", "*.jinja", "tokenizer*"]  # what a GGUF needs from a hub repo


@dataclass
class Model:
    spec: str          # as the user wrote it (for sentences)
    folder: Path       # where its files are
    config: object     # transformers' config


@dataclass
class Export:
    target: Path
    drafter: Path
    notes: list[str] = field(default_factory=list)   # what llama.cpp as published will refuse, and why


def export_pair(target: str, drafter: str | None, out: str | os.PathLike, outtype: str = "f32",
                force: bool = False) -> Export:
    """Write ``out/target.gguf`` and ``out/drafter.gguf`` for a Gemma 4 target and its MTP
    assistant. ``target``/``drafter``: a preset (``tiny``), a hub id or a folder, resolved as
    ``load_pair`` resolves them (the drafter by default the preset's, or ``<target>-assistant``).
    ``outtype``: f32, f16, bf16 or q8_0 (norms, scales and the router stay float32).
    ``force``: replace a pair ``out`` already holds."""
    if outtype not in OUTTYPES:
        raise UserError(f"--outtype must be one of {', '.join(OUTTYPES)}, not {clip(outtype, 20)}.")
    if not target or not str(target).strip():
        raise UserError("No target model was given.")
    not_there(out, force)
    target_spec, preset_drafter = resolve(str(target).strip())
    t = open_model(target_spec, str(target))
    if t.config.model_type not in GEMMA4_TYPES:
        raise UserError(f"{clip(target)} is not a Gemma 4 model (its type is {clip(t.config.model_type, 40)}); "
                        "mtp-viz gguf writes Gemma 4 targets and their MTP assistants.")
    d_spec = drafter_spec(drafter) if drafter else preset_drafter or default_drafter(target_spec)
    if d_spec is None:
        raise UserError(f"{clip(target)} has no MTP assistant beside it; name one with --drafter.")
    # named as the user named it: a preset's drafter by the preset, never by its resolved path
    d = open_model(d_spec, str(drafter) if drafter else f"{clip(target, 40)}'s drafter" if preset_drafter else d_spec)
    if d.config.model_type not in ASSISTANT_TYPES:
        raise UserError(f"{clip(d.spec)} is not a Gemma 4 MTP assistant, which llama.cpp's draft-mtp needs.")
    check_pair(t.config, d.config, t.spec, d.spec)
    weights = {m.spec: tensors_.read_tensors(m.folder, m.spec) for m in (t, d)}
    for m in (t, d):
        tensors_.check_shapes(weights[m.spec], text_config(m.config), m.spec)
    tensors_.check_drafter(weights[t.spec], weights[d.spec], t.spec, d.spec)
    folder = writable(out)
    result = Export(folder / "target.gguf", folder / "drafter.gguf", notes(t, d))
    parts = [result.target.with_name(".target.gguf.part"), result.drafter.with_name(".drafter.gguf.part")]
    try:
        write_model(t, weights[t.spec], t, parts[0], outtype)
        write_model(d, weights[d.spec], t, parts[1], outtype)
        os.replace(parts[0], result.target)   # both whole: into place, one after the other
        os.replace(parts[1], result.drafter)
    except OSError as e:
        raise UserError(f"Cannot write the GGUF pair into {clip(out)} ({e.strerror or type(e).__name__}).") from None
    finally:
        for part in parts:
            part.unlink(missing_ok=True)
    return result


def not_there(out, force: bool) -> None:
    """One sentence when ``out`` holds a pair (either file) already and ``force`` is not set."""
    there = [name for name in ("target.gguf", "drafter.gguf") if (Path(out).expanduser() / name).exists()]
    if there and not force:
        raise UserError(f"{clip(out)} already holds {' and '.join(there)}; pass --force to replace "
                        f"{'them' if len(there) > 1 else 'it'}.")


def export_random(target: str, out: str | os.PathLike, outtype: str = "f32", force: bool = False) -> Export:
    """:func:`export_pair` for ``target``'s real shape with random weights (:mod:`..shapes`):
    the pair is built in the precision of ``outtype`` (bf16 for bf16 and q8_0), saved beside
    the output as a model folder, written, and the folder removed. Its tokenizer is the
    random pair's byte-level one, which llama.cpp's gpt2 vocabulary tokenizes the same."""
    import shutil
    import tempfile

    from ..models import load_pair
    if outtype not in OUTTYPES:
        raise UserError(f"--outtype must be one of {', '.join(OUTTYPES)}, not {clip(outtype, 20)}.")
    not_there(out, force)   # before a pair is built
    folder = writable(out)
    dtype = {"f32": "float32", "f16": "float16"}.get(outtype, "bfloat16")
    pair = load_pair(target, weights="random", dtype=dtype, device="cpu")
    if pair.drafter_model is None:
        raise UserError(f"{clip(target)} has no MTP assistant shape to write.")
    work = Path(tempfile.mkdtemp(prefix=".random-", dir=folder))
    try:
        for name, model in (("target", pair.target), ("drafter", pair.drafter_model)):
            model.save_pretrained(work / name)
            pair.tokenizer.save_pretrained(work / name)
        del pair
        return export_pair(str(work / "target"), str(work / "drafter"), folder, outtype, force)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def open_model(spec: str, as_written: str) -> Model:
    """The model's local folder (a hub id is fetched into the Hugging Face cache, or found
    there offline) and its config, never with remote code."""
    from transformers import AutoConfig
    try:
        if is_local(spec):
            folder = Path(model_path(spec))
        else:
            from huggingface_hub import snapshot_download
            folder = Path(snapshot_download(spec, allow_patterns=HUB_FILES))
        config = AutoConfig.from_pretrained(str(folder), trust_remote_code=False)
    except UserError:
        raise
    except Exception as err:  # noqa: BLE001 - every loading failure becomes one sentence
        raise explain_load_error(as_written, err) from err
    return Model(as_written, folder, config)


def writable(out) -> Path:
    folder = Path(out).expanduser()
    if folder.exists() and not folder.is_dir():
        raise UserError(f"{clip(out)} is a file, not a folder to write GGUF files into.")
    try:
        folder.mkdir(parents=True, exist_ok=True)
        probe = folder / ".mtp-viz-write-test"
        probe.touch()
        probe.unlink()
    except OSError as e:
        raise UserError(f"Cannot write to {clip(out)} ({e.strerror or type(e).__name__}).") from None
    return folder


def notes(target: Model, drafter: Model) -> list[str]:
    """What llama.cpp's loader (as published) refuses in this assistant: the writer writes it
    all the same, and says so, rather than writing something else than the checkpoint."""
    text, width = text_config(drafter.config), text_config(target.config).hidden_size
    out = []
    if text.hidden_size == width:
        out.append(f"llama.cpp as published refuses this drafter: it is as wide as its target ({width}), "
                   "and llama.cpp's Gemma 4 assistant must be narrower.")
    if "sliding_attention" not in text.layer_types:
        out.append("llama.cpp as published refuses this drafter: it has no sliding-attention layer, "
                   "and llama.cpp's Gemma 4 assistant needs one.")
    return out


def write_model(model: Model, tensors: list, tokenizer_of: Model, path: Path, outtype: str) -> None:
    """One GGUF file of ``model`` (its ``tensors``, checked) at ``path``: the caller's
    temporary name, which it moves into place."""
    import gguf

    assistant = model.config.model_type in ASSISTANT_TYPES
    tensors = list(tensors)
    text = text_config(model.config)
    writer = gguf.GGUFWriter(None, "gemma4-assistant" if assistant else "gemma4")
    writer.add_type("model")
    writer.add_name(Path(model.spec.rstrip("/\\")).name or model.spec)
    writer.add_file_type(int(getattr(gguf.LlamaFileType, OUTTYPES[outtype][0])))
    head_dim_full = hparams(writer, model, tensors)
    if "full_attention" in text.layer_types:  # the proportional RoPE of the full-attention layers
        tensors.insert(0, rope_freqs(text, head_dim_full, model.spec))
    n_vocab = next(t.shape[0] for t in tensors if t.name == "token_embd.weight")
    vocab.write(writer, tokenizer_of.folder, tokenizer_of.spec, n_vocab)
    if model.config.model_type.startswith("gemma4_unified") and (suppress := suppressed(model.folder)):
        writer.add_array("tokenizer.ggml.suppress_tokens", suppress)   # as the converter's Gemma4UnifiedModel
    writer.add_quantization_version(gguf.GGML_QUANT_VERSION)
    write_tensors(writer, path, tensors, getattr(gguf.GGMLQuantizationType, OUTTYPES[outtype][1]))


def suppressed(folder: Path) -> list[int]:
    """The tokens the 12B family's generation config never lets it write."""
    import json
    path = folder / "generation_config.json"
    if not path.is_file():
        return []
    return list(json.loads(path.read_text(encoding="utf-8")).get("suppress_tokens") or [])


def storage(name: str, shape: tuple, wanted):
    """The type a tensor is stored as: norms, scales, 1-D tensors and the MoE router stay
    float32 (llama.cpp's kernels for them take float32, and the converter keeps them so);
    a row that does not divide into q8_0's blocks of 32 falls back to f16, as there."""
    import gguf
    Q = gguf.GGMLQuantizationType
    if len(shape) <= 1 or name.endswith("_norm.weight") or not name.endswith(".weight") \
            or name.endswith("ffn_gate_inp.weight"):
        return Q.F32
    if wanted == Q.Q8_0 and shape[-1] % gguf.GGML_QUANT_SIZES[Q.Q8_0][0]:
        return Q.F16
    return wanted


def write_tensors(writer, path: Path, tensors: list, wanted) -> None:
    """The header with every tensor's name, shape and size first, then the data, one
    tensor loaded, converted and written at a time."""
    import gguf
    import numpy as np

    kinds = []
    for t in tensors:
        kind = storage(t.name, t.shape, wanted)
        block, size = gguf.GGML_QUANT_SIZES[kind]
        writer.add_tensor_info(t.name, t.shape, np.dtype(np.float32), math.prod(t.shape) // block * size,
                               raw_dtype=kind)
        kinds.append(kind)
    try:
        writer.write_header_to_file(path=path)
        writer.write_kv_data_to_file()
        writer.write_ti_data_to_file()
        for t, kind in zip(tensors, kinds):
            writer.write_tensor_data(gguf.quants.quantize(np.ascontiguousarray(t.load(), dtype=np.float32), kind))
    finally:   # a tensor that cannot be read leaves the file closed, for the caller to remove
        writer.close()


def rope_freqs(text, head_dim_full: int, spec: str):
    """Full attention's proportional RoPE rotates only a fraction of each head; ggml's rotates
    a prefix, so the converter gives the unrotated pairs a frequency factor of 1e30
    (``Gemma4Model.generate_extra_tensors``): the same tensor here."""
    import numpy as np
    rope = dict(text.rope_parameters or {})
    full = rope.get("full_attention", rope)
    kind = full.get("rope_type", "default")
    if kind not in ("proportional", "default"):
        raise UserError(f"{clip(spec)} uses {clip(kind, 30)} RoPE on full attention, which llama.cpp's "
                        "Gemma 4 does not take.")
    factor = full.get("partial_rotary_factor", 1.0) if kind == "proportional" else 1.0
    n_rot = int(head_dim_full * factor / 2)
    values = np.array([1.0] * n_rot + [1e30] * (head_dim_full // 2 - n_rot), dtype=np.float32)
    return tensors_.Tensor("rope_freqs.weight", values.shape, lambda: values)


def per_layer(cfg: dict, i: int, key: str):
    """A layer's value of a config setting: its per_layer_config entry, or the global one.
    (transformers 5 guards such settings on a heterogeneous config object, so the dict is read.)"""
    return (cfg.get("per_layer_config") or {}).get(str(i), {}).get(key, cfg.get(key))


def hparams(writer, model: Model, tensors: list) -> int:
    """The architecture's keys, as the converter writes them; returns the full-attention
    layers' head size. Per-layer sizes are read off the weights (``q_norm``: the head size,
    ``k_proj``: the K/V heads, ``gate_proj``: the FFN width)."""
    cfg = text_config(model.config).to_dict()
    shapes = {t.name: t.shape for t in tensors}
    swa = [kind == "sliding_attention" for kind in cfg["layer_types"]]
    n = len(swa)
    head = [shapes[f"blk.{i}.attn_q_norm.weight"][0] for i in range(n)]
    head_swa = next((h for h, s in zip(head, swa) if s), cfg["head_dim"])
    head_full = next((h for h, s in zip(head, swa) if not s), cfg["head_dim"])
    kv = [shapes[f"blk.{i}.attn_k.weight"][0] // head[i] if f"blk.{i}.attn_k.weight" in shapes
          else per_layer(cfg, i, "num_key_value_heads") for i in range(n)]   # an assistant reads the target's
    ff = [shapes[f"blk.{i}.ffn_gate.weight"][0] for i in range(n)]
    rope = dict(cfg.get("rope_parameters") or {})
    sliding = rope.get("sliding_attention", {})

    writer.add_block_count(n)
    writer.add_context_length(cfg["max_position_embeddings"])
    writer.add_embedding_length(cfg["hidden_size"])
    writer.add_feed_forward_length(ff[0] if len(set(ff)) == 1 else ff)
    writer.add_head_count(cfg["num_attention_heads"])
    writer.add_head_count_kv(kv[0] if len(set(kv)) == 1 else kv)
    writer.add_rope_freq_base(rope.get("full_attention", rope).get("rope_theta", 1_000_000.0))
    if "rope_theta" in sliding:
        writer.add_rope_freq_base_swa(sliding["rope_theta"])
    writer.add_layer_norm_rms_eps(cfg["rms_norm_eps"])
    if cfg.get("enable_moe_block"):
        writer.add_expert_count(cfg["num_experts"])
        writer.add_expert_used_count(cfg["top_k_experts"])
        writer.add_expert_feed_forward_length(cfg["moe_intermediate_size"])
    if cfg.get("final_logit_softcapping"):
        writer.add_final_logit_softcapping(cfg["final_logit_softcapping"])
    writer.add_key_length(head_full)
    writer.add_value_length(head_full)
    writer.add_key_length_swa(head_swa)
    writer.add_value_length_swa(head_swa)
    writer.add_sliding_window(cfg["sliding_window"])
    writer.add_sliding_window_pattern(swa)
    writer.add_shared_kv_layers(cfg.get("num_kv_shared_layers") or 0)
    writer.add_embedding_length_per_layer_input(cfg.get("hidden_size_per_layer_input") or 0)
    writer.add_rope_dimension_count(head_full)     # the 1e30 factors of rope_freqs leave the rest unrotated
    writer.add_rope_dimension_count_swa(int(head_swa * sliding.get("partial_rotary_factor", 1.0)))
    if model.config.model_type in ASSISTANT_TYPES:
        writer.add_embedding_length_out(model.config.backbone_hidden_size)   # the target's width
        writer.add_nextn_predict_layers(n)
    return head_full
