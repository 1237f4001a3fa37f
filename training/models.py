"""Configurations of the tiny Gemma 4 target and its MTP drafter (assistant)."""

from __future__ import annotations

from transformers import (
    Gemma4AssistantConfig,
    Gemma4AssistantForCausalLM,
    Gemma4ForCausalLM,
    Gemma4TextConfig,
)

from .data import BOS, EOS, PAD

VOCAB = 4096
HEAD_DIM = 64
KV_HEADS = 1
SLIDING_WINDOW = 128


def target_config(quick: bool = False, vocab_size: int = VOCAB) -> Gemma4TextConfig:
    hidden, layers, inter = (64, 3, 128) if quick else (256, 6, 512)
    return Gemma4TextConfig(
        vocab_size=vocab_size,
        hidden_size=hidden,
        intermediate_size=inter,
        num_hidden_layers=layers,
        num_attention_heads=4,
        num_key_value_heads=KV_HEADS,
        head_dim=HEAD_DIM,
        global_head_dim=HEAD_DIM,  # full-attention layers use the same head_dim as sliding ones
        # quick: a window shorter than the smoke-test sequences, so the sliding masks are exercised
        sliding_window=16 if quick else SLIDING_WINDOW,
        layer_types=(["sliding_attention"] * 2 + ["full_attention"]) * (layers // 3),
        max_position_embeddings=4096,
        vocab_size_per_layer_input=0,
        hidden_size_per_layer_input=0,
        tie_word_embeddings=True,
        pad_token_id=PAD,
        eos_token_id=EOS,
        bos_token_id=BOS,
        attn_implementation="sdpa",
    )


def drafter_config(target_cfg: Gemma4TextConfig, quick: bool = False) -> Gemma4AssistantConfig:
    hidden, layers, inter = (64, 2, 128) if quick else (256, 2, 512)
    text = Gemma4TextConfig(
        vocab_size=target_cfg.vocab_size,
        hidden_size=hidden,
        intermediate_size=inter,
        num_hidden_layers=layers,
        num_attention_heads=4,
        num_key_value_heads=target_cfg.num_key_value_heads,
        head_dim=target_cfg.head_dim,
        global_head_dim=target_cfg.head_dim,
        sliding_window=target_cfg.sliding_window,
        layer_types=["sliding_attention"] * (layers - 1) + ["full_attention"],
        max_position_embeddings=target_cfg.max_position_embeddings,
        rope_parameters=target_cfg.rope_parameters,
        vocab_size_per_layer_input=0,
        hidden_size_per_layer_input=0,
        num_kv_shared_layers=layers,
        tie_word_embeddings=True,
        pad_token_id=PAD,
        eos_token_id=EOS,
        bos_token_id=BOS,
    )
    return Gemma4AssistantConfig(
        text_config=text,
        backbone_hidden_size=target_cfg.hidden_size,
        use_ordered_embeddings=False,
        tie_word_embeddings=True,
        pad_token_id=PAD,
        eos_token_id=EOS,
        bos_token_id=BOS,
    )


def build_target(quick: bool = False, vocab_size: int = VOCAB) -> Gemma4ForCausalLM:
    return Gemma4ForCausalLM(target_config(quick, vocab_size))


def build_drafter(target_cfg: Gemma4TextConfig, quick: bool = False) -> Gemma4AssistantForCausalLM:
    return Gemma4AssistantForCausalLM(drafter_config(target_cfg, quick))


def n_params(model) -> int:
    return sum(p.numel() for p in {id(p): p for p in model.parameters()}.values())
