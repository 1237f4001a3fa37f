"""A notebook reader's mistakes, each one sentence (issue: one instrument): the pair
swapped, record() around the assistant or around something that is not a model, a
processor where a model belongs. Random Gemma 4 pairs from configs (tests/factories.py)."""
import pytest

from factories import gemma_assistant, gemma_target, word_tokenizer
from mtp_viz.errors import UserError
from mtp_viz.sources.hf_generate import record
from mtp_viz.sources.models import from_models


@pytest.fixture(scope="module")
def pair():
    return gemma_target(), gemma_assistant()


def test_a_swapped_pair_names_the_assistant(pair):
    target, assistant = pair
    with pytest.raises(UserError, match=r"is a Gemma 4 MTP assistant, the drafter: give the model it drafts for "
                                        r"as the target"):
        from_models(assistant, target, word_tokenizer())


def test_a_processor_where_the_drafter_belongs_is_one_sentence(pair):
    target, _ = pair
    tok = word_tokenizer()
    with pytest.raises(UserError, match="^from_models needs the drafter model itself"):
        from_models(target, tok, tok)


def test_record_around_the_assistant_says_to_wrap_the_target(pair):
    _, assistant = pair
    with pytest.raises(UserError, match=r"^record\(\) wraps the target model.*this is the assistant"):
        record(assistant)


@pytest.mark.parametrize("thing", [word_tokenizer(), "google/gemma-4-E2B-it", None])
def test_record_around_what_is_not_a_model_is_one_sentence(thing):
    with pytest.raises(UserError, match=r"^record\(\) needs the target model whose generate you call"):
        record(thing)
