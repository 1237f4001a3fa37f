"""Loading local pairs: chat template, default drafter, drafter kinds, error sentences;
the engine leaves torch's global RNG alone; schedules carry across generations."""
import pytest
import torch

from factories import CHAT_TEMPLATE as TEMPLATE, save_gemma_pair
from mtp_viz.engine.drafters.lookup import PromptLookupDrafter
from mtp_viz.engine.drafters.mtp import MTPDrafter
from mtp_viz.errors import UserError
from mtp_viz.sources.models import load_pair
from mtp_viz.sources.presets import PRESETS, resolve


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


@pytest.mark.parametrize("kw", [dict(), dict(temperature=0.9, seed=7), dict(temperature=0.9)],
                         ids=["greedy", "seeded", "unseeded"])
def test_generation_leaves_the_global_rng_alone(folders, kw):
    pair = load_pair(str(folders[0]))
    torch.manual_seed(1234)
    expected = torch.rand(4)
    torch.manual_seed(1234)
    for _ in pair.generate("w10 w11 w12", max_new_tokens=12, chat=False, **kw):
        pass
    for _ in pair.generate("w10 w11 w12", mode="autoregressive", max_new_tokens=6, chat=False, **kw):
        pass
    assert torch.equal(torch.rand(4), expected)


def test_heuristic_schedule_carries_its_length_across_generations(folders):
    pair = load_pair(str(folders[0]))

    def run():
        events = list(pair.generate("w10 w11 w12", max_new_tokens=24, draft_tokens=3,
                                    schedule="heuristic", chat=False))
        steps = [e for e in events if e.type == "step"]
        return steps[1].draft_tokens, steps[-1].next_draft_tokens  # first drafting step, last choice

    first_len, carried = run()
    second_len, _ = run()
    assert first_len == 3 and carried != 3
    assert second_len == carried  # the second generation starts where the first ended
    transient = [e for e in pair.generate("w10 w11 w12", max_new_tokens=24, draft_tokens=3,
                                          schedule="heuristic_transient", chat=False) if e.type == "step"]
    assert transient[1].draft_tokens == 3


def test_a_preset_name_as_drafter_means_its_drafter():
    pair = load_pair("tiny", "tiny")
    assert pair.has_mtp and pair.drafter_name.endswith("tiny/drafter")


@pytest.mark.parametrize("spec", ["/root", "/root/.ssh", "/nonexistent/model", "~", "./"])
def test_local_paths_get_one_answer_that_leaks_nothing(spec):
    with pytest.raises(UserError) as e:
        load_pair(spec)
    assert str(e.value) == f"There is no loadable model folder at {spec}."


@pytest.mark.slow
def test_hub_errors_are_classified_by_type():
    with pytest.raises(UserError, match="is not a preset, a model folder or in the local Hugging Face cache"):
        load_pair("nobody-here/no-such-model")
    with pytest.raises(UserError, match="neither a local model folder nor a model id"):
        load_pair("not a valid id")


def test_prompts_past_the_context_are_refused_before_any_forward(folders):
    pair = load_pair(str(folders[0]))
    n = pair.context_length
    assert n > 0
    with pytest.raises(UserError, match="exceeds the model's context"):
        pair.generate(" ".join(["w10"] * n), max_new_tokens=8, chat=False)
    with pytest.raises(UserError, match="not valid UTF-8"):
        pair.generate("w10 \udcff", chat=False)


def test_presets_resolve():
    assert set(PRESETS) == {"tiny", "e2b", "e4b", "12b", "31b", "26b-a4b"}
    assert resolve("e2b") == ("google/gemma-4-E2B-it", "google/gemma-4-E2B-it-assistant")
    assert resolve("12B") == ("google/gemma-4-12B-it", "google/gemma-4-12B-it-assistant")
    target, drafter = resolve("tiny")
    assert target.endswith("assets/tiny/target") and drafter.endswith("assets/tiny/drafter")
    assert resolve("some/model") == ("some/model", None)
    assert "mixture of experts" in PRESETS["26b-a4b"].note.lower()
    assert "estimate" in PRESETS["12b"].note


@pytest.mark.parametrize("key", [k for k in PRESETS if k != "tiny"])
def test_each_preset_states_its_memory_in_both_dtypes(key):
    """float32 takes 4 bytes a parameter where bfloat16 takes 2: twice the memory."""
    p = PRESETS[key]
    bf16, fp32 = (float(s.removeprefix("≈ ").removesuffix(" GB")) for s in (p.memory_bf16, p.memory_float32))
    download = float(p.download.removeprefix("≈ ").removesuffix(" GB"))
    assert download < bf16 and fp32 == 2 * bf16


def test_a_name_offline_is_refused_before_any_hub_call_with_the_closest_preset(monkeypatch):
    """No retries to wait through: the refusal comes before transformers is asked for a config."""
    import transformers
    asked = []
    real = transformers.AutoConfig.from_pretrained
    monkeypatch.setattr(transformers.AutoConfig, "from_pretrained", lambda *a, **k: asked.append(a) or real(*a, **k))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    for name, near in (("tinny", "tiny"), ("E2b-it", "e2b"), ("zzzz/unknown", None)):
        with pytest.raises(UserError) as e:
            load_pair(name)
        assert asked == []
        said = str(e.value)
        assert said.startswith(f"{name} is not a preset") and "the presets are tiny, e2b" in said
        assert (f"did you mean {near}?" in said) if near else "did you mean" not in said


def test_a_preset_not_downloaded_is_refused_at_once_when_the_hub_cannot_be_reached(monkeypatch):
    """e2b offline: one sentence before transformers is asked for a config (it was 28 s of
    retries), naming the download and what runs instead."""
    import transformers
    asked = []
    real = transformers.AutoConfig.from_pretrained
    monkeypatch.setattr(transformers.AutoConfig, "from_pretrained", lambda *a, **k: asked.append(a) or real(*a, **k))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(UserError) as e:
        load_pair("e2b")
    assert asked == []
    assert str(e.value).startswith("e2b (google/gemma-4-E2B-it) is not in the local Hugging Face cache")
    assert "bundled tiny pair" in str(e.value) and "--weights random" in str(e.value)
    assert load_pair("tiny").target_id   # the bundled pair ships: never refused
