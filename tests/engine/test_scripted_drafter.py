"""A drafter with a set acceptance runs the real drafter and proposes the target's greedy
path with probability α per position: the output is plain greedy's whatever α is, α = 1
keeps every draft and α = 0 none, and in between the kept drafts follow Leviathan's model."""
import pytest

from factories import gemma_assistant, gemma_target
from mtp_viz.engine import theory
from mtp_viz.engine.drafters.mtp import MTPDrafter
from mtp_viz.engine.drafters.scripted import ScriptedDrafter
from mtp_viz.engine.events import Done, Drafted, Step
from mtp_viz.engine.loop import autoregressive, speculative

V, N, PROMPT = 512, 48, [5, 17, 33, 2, 9, 40, 41, 7]


@pytest.fixture(scope="module")
def models():
    return gemma_target(V), gemma_assistant(V)


class Counted:
    """The drafter's step, counting its calls."""
    def __init__(self, step):
        self.step, self.calls = step, 0

    def inputs(self, *a):
        return self.step.inputs(*a)

    def __call__(self, *a):
        self.calls += 1
        return self.step(*a)


def run(models, alpha, draft_tokens=4, seed=0):
    target, assistant = models
    script = list(autoregressive(target, PROMPT, max_new_tokens=N))[-1].generated_ids
    inner = MTPDrafter(assistant, target)
    inner.step = counted = Counted(inner.step)   # counts the assistant's real forwards
    d = ScriptedDrafter(inner, script, len(PROMPT), alpha, V, seed)
    events = list(speculative(target, d, PROMPT, max_new_tokens=N, draft_tokens=draft_tokens))
    return script, events, counted.calls


@pytest.mark.parametrize("alpha", [0.0, 0.3, 0.7, 1.0])
def test_the_output_is_plain_greedy_whatever_alpha(models, alpha):
    script, events, _ = run(models, alpha)
    assert list(events[-1].generated_ids) == list(script)


def test_alpha_one_keeps_every_draft_and_zero_none(models):
    _, events, forwards = run(models, 1.0)
    steps = [e for e in events if isinstance(e, Step) and e.draft_tokens]
    assert all(s.agreed == s.draft_tokens for s in steps)
    assert forwards == sum(s.draft_tokens for s in steps) == sum(isinstance(e, Drafted) for e in events)
    _, events, _ = run(models, 0.0)
    assert all(s.agreed == 0 for s in events if isinstance(s, Step))


def test_the_kept_drafts_follow_the_geometric_model(models):
    """Over many steps the maximum-likelihood α is the set one, and tokens per step are Eq. 1's."""
    agreed = rejections = steps = tokens = 0
    for seed in range(6):
        _, events, _ = run(models, 0.6, seed=seed)
        for s in events:
            if isinstance(s, Step) and s.draft_tokens == 4:
                steps += 1
                agreed += s.agreed
                rejections += s.agreed < s.draft_tokens
                tokens += s.agreed + 1
    assert steps > 60
    assert theory.alpha_mle(agreed, rejections) == pytest.approx(0.6, abs=0.1)
    assert tokens / steps == pytest.approx(theory.expected_tokens(0.6, 4), rel=0.15)


def test_a_run_off_the_script_proposes_nothing_it_cannot_know(models):
    target, assistant = models
    d = ScriptedDrafter(MTPDrafter(assistant, target), [1, 2, 3], len(PROMPT), 1.0, V)
    assert d._truth(PROMPT + [1, 2], 4) == [3]
    assert d._truth(PROMPT + [1, 9], 4) == []
    with pytest.raises(ValueError):
        ScriptedDrafter(MTPDrafter(assistant, target), [], 0, 1.5, V)
    assert isinstance(run(models, 0.5)[1][-1], Done)
