"""Small random models built from configs (no download) and drafters we control."""
from __future__ import annotations

import torch
from transformers import (
    Gemma4AssistantConfig,
    Gemma4AssistantForCausalLM,
    Gemma4ForCausalLM,
    Gemma4TextConfig,
    LlamaConfig,
    LlamaForCausalLM,
    PreTrainedTokenizerFast,
)

from mtp_viz.engine.drafters.base import DraftContext, Proposal


def gemma_text_config(V=512, window=16, layers=4, **extra):
    """The small Gemma 4 target's text config (``extra``: e.g. the mixture-of-experts fields)."""
    return Gemma4TextConfig(
        vocab_size=V, hidden_size=64, intermediate_size=128, num_hidden_layers=layers,
        num_attention_heads=2, num_key_value_heads=1, head_dim=32, global_head_dim=32,
        vocab_size_per_layer_input=V, hidden_size_per_layer_input=8, sliding_window=window,
        layer_types=["sliding_attention"] * (layers - 1) + ["full_attention"],
        max_position_embeddings=2048, pad_token_id=0, eos_token_id=1, bos_token_id=2, **extra)


def gemma_target(V=512, window=16, seed=0, sharpen=1.0, layers=4):
    torch.manual_seed(seed)
    model = Gemma4ForCausalLM(gemma_text_config(V, window, layers)).eval()
    if sharpen != 1.0:  # peakier distributions make statistical tests more powerful
        with torch.no_grad():
            model.lm_head.weight.mul_(sharpen)
    return model


def gemma_assistant(V=512, window=16, seed=1, ordered=False, k=4, backbone=64):
    torch.manual_seed(seed)
    text = Gemma4TextConfig(
        vocab_size=V, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
        num_attention_heads=2, num_key_value_heads=1, head_dim=32, global_head_dim=32,
        vocab_size_per_layer_input=0, hidden_size_per_layer_input=0, sliding_window=window,
        layer_types=["sliding_attention", "full_attention"], num_kv_shared_layers=2)
    extra = dict(num_centroids=16, centroid_intermediate_top_k=4) if ordered else {}
    cfg = Gemma4AssistantConfig(text_config=text, backbone_hidden_size=backbone,
                                use_ordered_embeddings=ordered, **extra)
    model = Gemma4AssistantForCausalLM(cfg).eval()
    if ordered:  # a permutation of the vocabulary into 16 clusters
        model.masked_embedding.token_ordering.copy_(torch.randperm(V))
    model.generation_config.num_assistant_tokens = k
    return model


def gemma_small_lm(V=512, window=16, seed=2):
    """An independent (non-MTP) Gemma 4 draft model sharing the vocabulary."""
    torch.manual_seed(seed)
    cfg = Gemma4TextConfig(
        vocab_size=V, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
        num_attention_heads=2, num_key_value_heads=1, head_dim=16, global_head_dim=16,
        vocab_size_per_layer_input=0, hidden_size_per_layer_input=0, sliding_window=window,
        layer_types=["sliding_attention", "full_attention"],
        pad_token_id=0, eos_token_id=1, bos_token_id=2)
    return Gemma4ForCausalLM(cfg).eval()


# ---- the classes real checkpoints load as (Gemma4ForConditionalGeneration, its MoE shape, the 12B family)
MOE = dict(enable_moe_block=True, num_experts=8, top_k_experts=2, moe_intermediate_size=32)  # 26B-A4B's fields


def gemma_multimodal(V=512, window=16, seed=0, moe=False):
    """What E2B/E4B/31B (and, with ``moe``, 26B-A4B) load as: the multimodal wrapper
    ``Gemma4ForConditionalGeneration``, its vision and audio towers left out."""
    from transformers import Gemma4Config, Gemma4ForConditionalGeneration
    torch.manual_seed(seed)
    text = gemma_text_config(V, window, **(MOE if moe else {}))
    return Gemma4ForConditionalGeneration(
        Gemma4Config(text_config=text.to_dict(), vision_config=None, audio_config=None)).eval()


def _unified_text(V, window, width, layers, **extra):
    from transformers import Gemma4UnifiedTextConfig
    return Gemma4UnifiedTextConfig(
        vocab_size=V, hidden_size=width, intermediate_size=2 * width, num_hidden_layers=layers,
        num_attention_heads=2, num_key_value_heads=1, head_dim=32, global_head_dim=32, sliding_window=window,
        layer_types=["sliding_attention"] * (layers - 1) + ["full_attention"], max_position_embeddings=2048,
        pad_token_id=0, eos_token_id=1, bos_token_id=2, **extra)


def unified_target(V=512, window=16, seed=0, wrapper=True):
    """The 12B family's target: ``Gemma4UnifiedForConditionalGeneration`` (towers left
    out), or with ``wrapper=False`` the text-only ``Gemma4UnifiedForCausalLM``."""
    from transformers import Gemma4UnifiedConfig, Gemma4UnifiedForCausalLM, Gemma4UnifiedForConditionalGeneration
    torch.manual_seed(seed)
    text = _unified_text(V, window, 64, 4)
    if not wrapper:
        return Gemma4UnifiedForCausalLM(text).eval()
    return Gemma4UnifiedForConditionalGeneration(
        Gemma4UnifiedConfig(text_config=text.to_dict(), vision_config=None, audio_config=None)).eval()


def unified_assistant(V=512, window=16, seed=1, k=4):
    """The 12B family's MTP assistant (``Gemma4UnifiedAssistantForCausalLM``) for a
    target of width 64, as ``google/gemma-4-12B-it-assistant`` is for one of width 3840."""
    from transformers import Gemma4UnifiedAssistantConfig, Gemma4UnifiedAssistantForCausalLM
    torch.manual_seed(seed)
    text = _unified_text(V, window, 32, 2, num_kv_shared_layers=2)
    model = Gemma4UnifiedAssistantForCausalLM(
        Gemma4UnifiedAssistantConfig(text_config=text.to_dict(), backbone_hidden_size=64)).eval()
    model.generation_config.num_assistant_tokens = k  # a fresh config has none; transformers needs it
    return model


def save_pair(root, target, assistant, tok):
    """Save a target and its assistant (each with the tokenizer) as a checkpoint is laid
    out: ``<root>/target`` and ``<root>/target-assistant``."""
    from pathlib import Path
    root = Path(root)
    for name, model in (("target", target), ("target-assistant", assistant)):
        model.save_pretrained(root / name)
        tok.save_pretrained(root / name)
    return root / "target", root / "target-assistant"


def llama(V=512, hidden=64, layers=2, seed=3):
    torch.manual_seed(seed)
    cfg = LlamaConfig(vocab_size=V, hidden_size=hidden, intermediate_size=2 * hidden,
                      num_hidden_layers=layers, num_attention_heads=2, num_key_value_heads=1,
                      pad_token_id=0, eos_token_id=1, bos_token_id=2)
    return LlamaForCausalLM(cfg).eval()


# A chat template in the word tokenizer's words: "w10 w11" as a user turn is [5, 10, 11, 6, 7]
CHAT_TEMPLATE = ("{% for m in messages %}w5 {{ m['content'] }} w6{% endfor %}"
                 "{% if add_generation_prompt %} w7{% endif %}")


def word_tokenizer(V=512):
    """A word-level tokenizer: token i is the word 'w{i}' (specials first)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    specials = ["<pad>", "<eos>", "<bos>", "<unk>"]
    vocab = {t: i for i, t in enumerate(specials)}
    for i in range(len(specials), V):
        vocab[f"w{i}"] = i
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok.decoder = decoders.WordPiece(prefix="##")  # joins words with spaces
    return PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<pad>", eos_token="<eos>",
                                   bos_token="<bos>", unk_token="<unk>")


def random_pair():
    """A random Gemma 4 pair behind the ModelPair interface, with a word-level tokenizer
    ("w10 w11 w12" is a prompt): what a Measure times in a second or two."""
    from mtp_viz.sources.pair import ModelPair
    return ModelPair(gemma_target(layers=4), gemma_assistant(), word_tokenizer(), "random", "random", "cpu")


def plain_ids(pair, prompt: str, n: int) -> tuple[int, ...]:
    """``pair``'s greedy plain tokens for ``prompt`` through the measurement runner (no chat
    template): what a server of the same model writes."""
    from mtp_viz.measure.records import AUTOREGRESSIVE
    from mtp_viz.measure.runner import Runner
    from mtp_viz.sources.settings import RunSettings
    runner = Runner(pair, RunSettings("", max_new_tokens=n, chat=False))
    try:
        return runner.run(AUTOREGRESSIVE, prompt)[0].ids
    finally:
        runner.close()


def greedy_reference(target, prompt, n, eos=None):
    ids = torch.tensor([prompt])
    out = target.generate(ids, do_sample=False, max_new_tokens=n, eos_token_id=eos,
                          pad_token_id=0)
    return out[0, len(prompt):].tolist()


class ScriptDrafter:
    """Proposes a known continuation (e.g. the target's own greedy output), optionally
    corrupting every ``wrong_every``-th drafted position, so acceptance paths are exercised."""
    kind = "script"
    needs_target_state = False
    default_draft_tokens = 4

    def __init__(self, prompt_len, script, wrong_every=0, vocab=512):
        self.prompt_len, self.script = prompt_len, list(script)
        self.wrong_every, self.vocab, self.calls = wrong_every, vocab, 0

    def reset(self):
        self.calls = 0

    def rollback(self, verified_len):
        pass

    def propose(self, ctx: DraftContext, k, pick, keep):
        start = len(ctx.ids) - self.prompt_len
        tokens = self.script[start:start + k]
        self.calls += 1
        if self.wrong_every and tokens and self.calls % self.wrong_every == 0:
            j = len(tokens) // 2
            tokens[j] = (tokens[j] + 7) % self.vocab
        return Proposal(tokens)


def save_moe_pair(root, V=512, window=16):
    """Save the 26B-A4B's shape (the multimodal wrapper, mixture of experts) with a random
    MTP assistant and the word tokenizer as two local folders."""
    return save_pair(root, gemma_multimodal(V, window, moe=True), gemma_assistant(V, window), word_tokenizer(V))


def save_gemma_pair(root, V=512, window=16, chat_template=None):
    """Save a random target + MTP assistant (+ word tokenizer) as two local folders."""
    target, assistant = gemma_target(V, window), gemma_assistant(V, window)
    tok = word_tokenizer(V)
    if chat_template:
        tok.chat_template = chat_template
    return save_pair(root, target, assistant, tok)


def gemma_bpe_tokenizer(V=512):
    """A tokenizer laid out as Gemma's own: SentencePiece-style BPE with byte fallback (spaces
    as '▁', 256 byte tokens <0x00>..<0xFF>, merges of letters), specials first."""
    import itertools

    from tokenizers import Tokenizer, decoders, models, normalizers, processors
    specials = ["<pad>", "<eos>", "<bos>", "<unk>"]
    vocab = {t: i for i, t in enumerate(specials)}
    vocab.update({f"<0x{b:02X}>": len(specials) + b for b in range(256)})
    letters = list("▁abcdefghijklmnopqrstuvwxyz")
    for c in letters:
        vocab[c] = len(vocab)
    merges = []
    for a, b in itertools.product(letters, letters):
        if len(vocab) >= V:
            break
        merges.append((a, b))
        vocab[a + b] = len(vocab)
    tok = Tokenizer(models.BPE(vocab, merges, byte_fallback=True, unk_token="<unk>", fuse_unk=True))
    tok.normalizer = normalizers.Replace(" ", "▁")
    tok.decoder = decoders.Sequence([decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse()])
    tok.post_processor = processors.TemplateProcessing(single="<bos> $A", special_tokens=[("<bos>", 2)])
    return PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<pad>", eos_token="<eos>",
                                   bos_token="<bos>", unk_token="<unk>")


def llamacpp_shaped_pair(V=512, window=16, seed=0, sharpen=8.0):
    """A random target and MTP assistant shaped as the real checkpoints are where llama.cpp
    checks (the assistant narrower than its target, with sliding and full layers; full
    attention's heads wider than sliding's, as 512 against 256 on the real ones). ``sharpen``
    scales the tied embedding, so the logits are far apart."""
    torch.manual_seed(seed)
    common = dict(vocab_size=V, num_attention_heads=2, num_key_value_heads=1, head_dim=32, global_head_dim=64,
                  sliding_window=window, max_position_embeddings=2048, pad_token_id=0, eos_token_id=1,
                  bos_token_id=2)
    target = Gemma4ForCausalLM(Gemma4TextConfig(
        hidden_size=64, intermediate_size=128, num_hidden_layers=6, vocab_size_per_layer_input=V,
        hidden_size_per_layer_input=8, layer_types=(["sliding_attention"] * 2 + ["full_attention"]) * 2,
        **common)).eval()
    text = Gemma4TextConfig(
        hidden_size=32, intermediate_size=64, num_hidden_layers=4, vocab_size_per_layer_input=0,
        hidden_size_per_layer_input=0, layer_types=["sliding_attention"] * 3 + ["full_attention"],
        num_kv_shared_layers=4, **common)
    assistant = Gemma4AssistantForCausalLM(Gemma4AssistantConfig(
        text_config=text, backbone_hidden_size=64, use_ordered_embeddings=False)).eval()
    assistant.generation_config.num_assistant_tokens = 4
    with torch.no_grad():  # wide gaps between logits: two engines' rounding cannot swap the greedy token
        target.model.embed_tokens.weight.mul_(sharpen)
    return target, assistant
