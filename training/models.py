"""Configurations of the tiny Gemma 4 target and its MTP drafter (assistant), and the target's depth up-scaling.

Sizes: on a CPU at these widths, per-layer overhead dominates the cost of a forward, so depth sets the
drafter/target cost ratio c. The drafter is shaped like the real Gemma 4 assistants, as llama.cpp requires of
one: narrower than its target (128 against 256, so `backbone_hidden_size` differs from its own width) and with
sliding and full attention (llama.cpp reads the target's last sliding layer's K/V for the one, its last full
layer's for the other). It has the fewest layers that allows, two (sliding, full), against the target's 24, so c
stays small, the regime of the real E2B assistant (about 78M parameters) against its roughly 5B-parameter target.
"""

from __future__ import annotations

import torch
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
PERIOD = 3  # layer pattern: sliding, sliding, full
TARGET_LAYERS = 24  # the shipped target: the 6-layer base grown by depth up-scaling (`upscale_target`)
BASE_LAYERS = 6  # the target trained from scratch before up-scaling
DRAFTER_HIDDEN, DRAFTER_LAYERS, DRAFTER_INTERMEDIATE = 128, 2, 512  # quick: 32, 2, 128
DEFAULT_DRAFT_TOKENS = 6  # the drafter's generation_config.num_assistant_tokens: near the measured best on a CPU


def target_config(quick: bool = False, vocab_size: int = VOCAB, layers: int | None = None) -> Gemma4TextConfig:
    """The target trained from scratch has `BASE_LAYERS` layers (3 with `quick`); `layers` overrides that."""
    hidden, base, inter = (64, 3, 128) if quick else (256, BASE_LAYERS, 512)
    layers = layers or base
    assert layers % PERIOD == 0, f"target layers must be a multiple of {PERIOD}"
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
        layer_types=(["sliding_attention"] * (PERIOD - 1) + ["full_attention"]) * (layers // PERIOD),
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
    """Shaped like the real assistants: narrower than the target, sliding layers then one full-attention layer
    (`DRAFTER_LAYERS` of them; llama.cpp's loader needs at least one of each and a width other than the target's)."""
    hidden, layers, inter = (32, 2, 128) if quick else (DRAFTER_HIDDEN, DRAFTER_LAYERS, DRAFTER_INTERMEDIATE)
    assert hidden != target_cfg.hidden_size and layers >= 2, "llama.cpp: narrower than the target, sliding + full"
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


def original_block_positions(old_layers: int, new_layers: int) -> dict[int, int]:
    """Depth up-scaling's placement: {new block index: original block index}; the other blocks are inserted."""
    old_blocks, new_blocks = old_layers // PERIOD, new_layers // PERIOD
    assert old_layers % PERIOD == 0 and new_layers % PERIOD == 0 and new_blocks >= old_blocks >= 2
    return {round(j * (new_blocks - 1) / (old_blocks - 1)): j for j in range(old_blocks)}


@torch.no_grad()
def upscale_target(small: Gemma4ForCausalLM, layers: int) -> tuple[Gemma4ForCausalLM, list[str]]:
    """Depth up-scaling: a `layers`-deep target that computes exactly what `small` computes.

    The small target's blocks (sliding, sliding, full) keep their order; its first block stays first and its last
    block stays last (so the last hidden state and the shared K/V the drafter reads still come from trained layers),
    the others are spread evenly. Every inserted block copies the weights of the nearest original block before it,
    with the gains of its post-attention and post-feed-forward norms set to zero: Gemma 4 normalises each branch's
    output before adding it to the residual stream, so a zero gain (not a zero output projection, which the norm
    would rescale to full size after the first update) makes the layer an exact identity.
    Returns the new model and the names of the zeroed gains."""
    new_blocks = layers // PERIOD
    cfg = type(small.config).from_dict({
        **small.config.to_dict(), "num_hidden_layers": layers,
        "layer_types": small.config.layer_types[:PERIOD] * new_blocks})
    big = Gemma4ForCausalLM(cfg)
    place = original_block_positions(small.config.num_hidden_layers, layers)
    old = small.state_dict()
    new = {k: v.clone() for k, v in old.items() if not k.startswith("model.layers.")}
    zeroed, src_block = [], 0
    for b in range(new_blocks):
        inserted = b not in place
        src_block = src_block if inserted else place[b]
        for r in range(PERIOD):
            src, dst = f"model.layers.{src_block * PERIOD + r}.", f"model.layers.{b * PERIOD + r}."
            for k, v in old.items():
                if k.startswith(src):
                    new[dst + k[len(src):]] = v.clone()
            if inserted:
                for norm in ("post_attention_layernorm", "post_feedforward_layernorm"):
                    new[f"{dst}{norm}.weight"].zero_()
                    zeroed.append(f"{dst}{norm}.weight")
    missing, unexpected = big.load_state_dict(new, strict=False)
    assert not unexpected and all(k == "lm_head.weight" for k in missing), (missing, unexpected)
    big.tie_weights()
    big.generation_config = small.generation_config
    return big, zeroed


def n_params(model) -> int:
    return sum(p.numel() for p in {id(p): p for p in model.parameters()}.values())
