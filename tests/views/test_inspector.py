"""The token inspector's and the anatomy panel's views: numbers from hand-built events
and from the loaded modules, checked against values computed here."""
import re

import pytest

from mtp_viz.engine.events import Accepted, Bonus, Drafted, Rejected, Start, Step, Token
from mtp_viz.views.anatomy import anatomy_html
from mtp_viz.views.inspector import acceptance, find, inspector_html

EVIL = '<img src=x onerror="alert(1)">'


def run(temperature: float):
    """One hand-built step: three drafts, the first kept, the second rejected (the third
    therefore never tested), then the target's correction."""
    p_top = dict(p_top_ids=(7, 8, 9, 10, 11), p_top=(0.5, 0.2, 0.1, 0.05, 0.04),
                 p_top_text=("a", EVIL, "c", "d", "e"))
    q_top = dict(q_top_ids=(8, 7, 12, 13, 14), q_top=(0.4, 0.3, 0.1, 0.05, 0.02),
                 q_top_text=(EVIL, "a", "f", "g", "h"))
    return [
        Start("speculative", 3, (1, 2, 3), {"temperature": temperature}),
        Drafted(2, 0, 7, "a", 0.3, **q_top), Drafted(2, 1, 8, EVIL, 0.4, **q_top),
        Drafted(2, 2, 12, "f", 0.1, **q_top),
        Accepted(2, 0, 7, "a", 0.5, 0.3, **p_top),
        Rejected(2, 1, 8, EVIL, 0.1, 0.4, **p_top),
        Rejected(2, 2, 12, "f", 0.02, 0.1, **p_top),
        Bonus(2, 9, "c", 0.1, 1, "correction", **p_top, residual_top_ids=(9, 7, 10, 11, 15),
              residual_top=(0.4, 0.3, 0.15, 0.1, 0.05), residual_top_text=("c", "a", "d", "e", "i")),
        Step(2, 3, 1, 2),
    ]


def rows(page: str, attr: str) -> list[float]:
    return [float(v) for v in re.findall(rf'data-{attr}="([0-9.]+)"', page)]


def test_acceptance_is_min_of_one_and_p_over_q():
    assert acceptance(0.1, 0.4) == pytest.approx(0.25)
    assert acceptance(0.5, 0.3) == 1.0
    assert acceptance(0.3, 0.0) == 1.0


def test_a_rejected_draft_under_sampling_shows_p_q_acceptance_and_the_residual():
    page = inspector_html(find(run(0.8), "rejected", 2, 1))
    assert rows(page, "p") == pytest.approx([0.5, 0.2, 0.1, 0.05, 0.04])
    assert rows(page, "q") == pytest.approx([0.4, 0.3, 0.1, 0.05, 0.02])
    assert rows(page, "residual") == pytest.approx([0.4, 0.3, 0.15, 0.1, 0.05])
    assert rows(page, "acceptance") == pytest.approx([0.25])      # min(1, 0.1 / 0.4)
    assert 'data-verdict="rejected"' in page and "0.250" in page
    assert EVIL not in page and "&lt;img" in page                  # model text is escaped
    assert page.count('class="mv-here"') == 3  # the draft in p and in q, the correction in the residual


def test_later_rejections_were_never_tested_and_show_no_residual():
    page = inspector_html(find(run(0.8), "rejected", 2, 2))
    assert "Never tested" in page and rows(page, "acceptance") == pytest.approx([0.2])
    assert rows(page, "residual") == [] and len(rows(page, "q")) == 5


def test_an_accepted_draft_and_greedy_runs():
    page = inspector_html(find(run(0.8), "accepted", 2, 0))
    assert rows(page, "acceptance") == [1.0] and "p ≥ q, so always" in page
    greedy = inspector_html(find(run(0.0), "rejected", 2, 1))
    assert 'data-verdict="rejected"' in greedy and "most likely token, here <code>a</code>" in greedy
    assert "Greedy run" in greedy and rows(greedy, "acceptance") == pytest.approx([0.25])


def test_the_correction_shows_the_residual_it_was_drawn_from():
    page = inspector_html(find(run(0.8), "bonus", 2, 1))
    assert 'data-verdict="correction"' in page and len(rows(page, "residual")) == 5
    assert rows(page, "q") == [] and "data-acceptance" not in page


def test_tokens_without_recorded_candidates_and_unknown_tokens():
    events = [Start("autoregressive", 1, (1,), {}), Token(1, 5, "x", 0.9), Step(1, 0, 0, 1)]
    page = inspector_html(find(events, "token", 1))
    assert "no top candidates" in page and rows(page, "p") == []
    assert find(events, "token", 9) is None and find(events, "nonsense", 1) is None
    assert "not in the run shown" in inspector_html(None)


def test_clustered_head_verdicts():
    events = run(0.0)
    events[5] = Rejected(2, 1, 8, EVIL, 0.1, 0.4, p_top_ids=(7,), p_top=(0.5,), p_top_text=("a",),
                         target_in_clusters="no")
    events[1] = Drafted(2, 0, 7, "a", 0.3, clusters=(3, 1, 4, 2))
    events[2] = Drafted(2, 1, 8, EVIL, 0.4, clusters=(3, 1, 4, 2))
    page = inspector_html(find(events, "rejected", 2, 1))
    assert 'data-clusters="no"' in page and "never a candidate" in page and "the 4 clusters" in page


# ---------------------------------------------------------------- anatomy


def test_anatomy_of_a_clustered_drafter_has_the_modules_numbers():
    from factories import gemma_assistant, gemma_target, word_tokenizer
    from mtp_viz.analysis.anatomy import anatomy
    from mtp_viz.sources.pair import ModelPair
    target, drafter = gemma_target(512, 16, layers=5), gemma_assistant(512, 16, ordered=True)
    pair = ModelPair(target, drafter, word_tokenizer(512), "my-target", "/srv/secret/drafter", "cpu")
    a = anatomy(pair)
    assert (a.target_layers, a.target_width, a.vocab) == (5, 64, 512)
    assert (a.drafter_layers, a.drafter_width, a.input_width, a.state_width) == (2, 32, 128, 64)
    assert a.clustered.centroids == 16 and a.clustered.top_clusters == 4 and a.clustered.candidates == 128
    # each drafter layer reads the target's last layer of its attention type
    assert [(layer.attention, layer.reads_target_layer) for layer in a.layers] == [("sliding_attention", 4),
                                                                                    ("full_attention", 5)]
    assert a.drafter == ""  # a folder path is never shown
    events = [Rejected(2, 0, 5, "x", 0.1, 0.5, target_in_clusters="no"),
              Rejected(3, 1, 6, "y", 0.1, 0.5, target_in_clusters="yes")]
    page = anatomy_html(a, events)
    assert 'data-target-layers="5"' in page and 'data-drafter-width="32"' in page
    assert 'data-centroids="16"' in page and "128 candidate tokens" in page and "/srv/secret" not in page
    assert 'data-outside="1"' in page and 'data-rejected="2"' in page
    assert 'data-target-precision="float32" data-drafter-precision="float32"' in page


def test_anatomy_says_what_each_model_runs_in():
    """Read from the models: a bfloat16 target and an int8 drafter (torchao by hand)."""
    import torch
    from torchao.quantization import Int8WeightOnlyConfig, quantize_

    from factories import gemma_assistant, gemma_target, word_tokenizer
    from mtp_viz.analysis.anatomy import anatomy
    from mtp_viz.sources.pair import ModelPair
    drafter = gemma_assistant(512, 16)
    quantize_(drafter, Int8WeightOnlyConfig())
    a = anatomy(ModelPair(gemma_target(512, 16).to(torch.bfloat16), drafter, word_tokenizer(512), "t", None, "cpu"))
    assert (a.target_precision, a.drafter_precision) == ("bfloat16", "int8")
    page = anatomy_html(a)
    assert 'data-target-precision="bfloat16" data-drafter-precision="int8"' in page
    assert "M parameters in bfloat16); the MTP drafter" in page and "M parameters in int8)." in page


def test_anatomy_of_a_pair_without_mtp_or_clusters():
    from mtp_viz.analysis.anatomy import Anatomy
    plain = Anatomy("t", "", "mtp", target_layers=24, target_width=256, vocab=4096, drafter_layers=1,
                    drafter_width=256, input_width=512, projected_width=256, state_width=256)
    page = anatomy_html(plain)
    assert "no clustered head" in page and "all 4096 tokens" in page and 'data-centroids="0"' in page
    assert "not a Gemma 4 MTP drafter" in anatomy_html(Anatomy("t", "", "none", target_layers=2))
    assert "once a model pair is loaded" in anatomy_html(None)
