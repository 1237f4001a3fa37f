"""Loading local pairs: chat template, default drafter, shared cache, drafter kinds."""
import pytest

from factories import save_gemma_pair
from mtp_viz.drafters import MTPDrafter, PromptLookupDrafter
from mtp_viz.errors import UserError
from mtp_viz.models import get_pair, load_pair
from mtp_viz.presets import PRESETS, resolve

TEMPLATE = ("{% for m in messages %}w5 {{ m['content'] }} w6{% endfor %}"
            "{% if add_generation_prompt %} w7{% endif %}")


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    return save_gemma_pair(tmp_path_factory.mktemp("chat"), chat_template=TEMPLATE)


def test_chat_template_is_applied_and_switchable(folders):
    pair = load_pair(str(folders[0]))
    assert pair.encode("w10 w11", chat=True) == [5, 10, 11, 6, 7]
    assert pair.encode("w10 w11", chat=False)[-2:] == [10, 11]
    with pytest.raises(UserError, match="The prompt is empty."):
        pair.encode("   ")


def test_default_drafter_is_the_sibling_assistant(folders):
    pair = load_pair(str(folders[0]))
    assert pair.has_mtp and pair.drafter_name.endswith("target-assistant")
    assert isinstance(pair.make_drafter(), MTPDrafter)
    assert isinstance(pair.make_drafter("lookup"), PromptLookupDrafter)
    assert pair.target.dtype.is_floating_point and str(pair.device) == "cpu"
    lookup_only = load_pair(str(folders[0]), drafter_kind="lookup")
    assert lookup_only.drafter_model is None
    with pytest.raises(UserError, match="no Gemma 4 MTP drafter"):
        lookup_only.make_drafter("mtp")


def test_get_pair_loads_once(folders):
    a = get_pair(str(folders[0]))
    assert get_pair(str(folders[0])) is a


def test_presets_resolve():
    assert set(PRESETS) == {"tiny", "e2b", "e4b", "31b", "26b-a4b"}
    assert resolve("e2b") == ("google/gemma-4-E2B-it", "google/gemma-4-E2B-it-assistant")
    target, drafter = resolve("tiny")
    assert target.endswith("assets/tiny/target") and drafter.endswith("assets/tiny/drafter")
    assert resolve("some/model") == ("some/model", None)
    assert "mixture of experts" in PRESETS["26b-a4b"].note.lower()
