"""from_models: a pair over models already in memory. It takes the chat template from
the processor or tokenizer it is given, reports the models' own device, loads nothing,
and refuses a pair that cannot work with one sentence."""
from types import SimpleNamespace

import pytest
import torch
import transformers

from factories import CHAT_TEMPLATE, gemma_assistant, gemma_target, llama, save_gemma_pair, word_tokenizer
from mtp_viz.errors import UserError
from mtp_viz.sources.models import from_models

V = 512
OTHER_TEMPLATE = "{% for m in messages %}w9 {{ m['content'] }}{% endfor %}"


@pytest.fixture(scope="module")
def models():
    return gemma_target(V), gemma_assistant(V)


@pytest.fixture
def no_loading(monkeypatch):
    """Every transformers loader fails the test if called."""
    def refuse(*args, **kwargs):
        raise AssertionError("from_models loaded something")
    for auto in ("AutoConfig", "AutoTokenizer", "AutoProcessor", "AutoModelForCausalLM"):
        monkeypatch.setattr(getattr(transformers, auto), "from_pretrained", refuse)


def with_template(template):
    tok = word_tokenizer(V)
    tok.chat_template = template
    return tok


def test_a_tokenizers_chat_template_is_used(models, no_loading):
    pair = from_models(*models, with_template(CHAT_TEMPLATE))
    assert pair.encode("w10 w11") == [5, 10, 11, 6, 7]
    assert pair.encode("w10 w11", chat=False) == [10, 11]


def test_a_processors_chat_template_wins_over_its_tokenizers(models, no_loading):
    """A processor (``.tokenizer`` and ``.chat_template``, as AutoProcessor gives for the
    multimodal checkpoints) lends its tokenizer and its own template."""
    processor = SimpleNamespace(tokenizer=with_template(OTHER_TEMPLATE), chat_template=CHAT_TEMPLATE)
    pair = from_models(*models, processor)
    assert pair.tokenizer is processor.tokenizer
    assert pair.encode("w10 w11") == [5, 10, 11, 6, 7]
    untemplated = from_models(*models, SimpleNamespace(tokenizer=word_tokenizer(V), chat_template=None))
    assert untemplated.encode("w10 w11") == [10, 11]  # no template: the prompt as text


def test_the_models_are_used_as_they_are(models, no_loading):
    target, drafter = models
    pair = from_models(target, drafter, word_tokenizer(V))
    assert pair.target is target and pair.drafter_model is drafter and pair.has_mtp
    assert pair.device == "cpu" and pair.name == "Gemma4ForCausalLM"
    # the device is the model's, not the best one available: a model on "meta" reports "meta"
    on_meta = gemma_target(V).to("meta")
    assert from_models(on_meta, None, word_tokenizer(V)).device == "meta"
    half = gemma_target(V).to(torch.bfloat16)
    assert from_models(half, None, word_tokenizer(V)).target.dtype == torch.bfloat16
    assert from_models(target, None, word_tokenizer(V)).loaded == ""  # no drafter: prompt lookup


def test_without_a_processor_the_tokenizer_comes_from_the_targets_folder(tmp_path):
    folder, _ = save_gemma_pair(tmp_path, chat_template=CHAT_TEMPLATE)
    pair = from_models(transformers.AutoModelForCausalLM.from_pretrained(folder))
    assert pair.encode("w10 w11") == [5, 10, 11, 6, 7]


@pytest.mark.parametrize("case, message", [
    ("vocabulary", "Gemma4AssistantForCausalLM and Gemma4ForCausalLM do not share a vocabulary "
                   "(256 vs 512 tokens)."),
    ("width", "The MTP drafter Gemma4AssistantForCausalLM was made for a target of width 128, "
              "but Gemma4ForCausalLM has width 64."),
    ("not gemma", "The Gemma 4 MTP drafter Gemma4AssistantForCausalLM needs a Gemma 4 target, "
                  "but LlamaForCausalLM is not a Gemma 4 model."),
    ("a name", "from_models needs the target model itself (a transformers model), not str."),
    ("no target", "from_models needs the target model itself (a transformers model), not NoneType."),
    ("a drafter name", "from_models needs the drafter model itself (a transformers model), not str."),
    ("no tokenizer", "from_models needs the processor or tokenizer for a target that was not loaded "
                     "from a folder or the Hub."),
    ("a tokenizer's name", "from_models needs the processor or tokenizer as its third argument, not str."),
])
def test_a_pair_that_cannot_work_is_one_sentence(models, no_loading, case, message):
    target, drafter = models
    tok = word_tokenizer(V)
    args = {"vocabulary": (target, gemma_assistant(256), tok), "width": (target, gemma_assistant(backbone=128), tok),
            "not gemma": (llama(V), drafter, tok), "a name": ("google/gemma-4-E2B-it", drafter, tok),
            "no target": (None, drafter, tok), "a drafter name": (target, "google/gemma-4-E2B-it-assistant", tok),
            "no tokenizer": (target, drafter, None), "a tokenizer's name": (target, drafter, "tok")}[case]
    with pytest.raises(UserError) as e:
        from_models(*args)
    assert str(e.value) == message
