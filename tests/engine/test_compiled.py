"""The compiled engine (engine/compiled.py) is still lossless, and says when it cannot run.

Small random pairs keep compile time down (the first compile of a graph takes seconds;
inductor caches it on disk for later processes). Greedy runs are held against
transformers' own ``generate``, token for token, past the sliding window (16) and with
drafts rejected; sampling against the target's exact distribution (the χ² test of
test_sampling.py, on the compiled target). The fallback is tested for real: a compiler
that does not exist, and a model the compiled engine does not take.
"""
import pytest
import torch

from factories import gemma_assistant, gemma_multimodal, gemma_target, greedy_reference, llama, word_tokenizer
from mtp_viz.engine import compiled, loop as engine, static
from mtp_viz.engine.drafters.mtp import MTPDrafter
from mtp_viz.engine.sampling import Sampling
from mtp_viz.sources.models import from_models

PROMPTS = [list(range(3, 23)), [5, 9, 5, 9, 7, 11, 5, 9, 5, 9]]
N = 48   # past the window of 16 from either prompt


@pytest.fixture(scope="module")
def pair():
    target, assistant = gemma_target(), gemma_assistant()
    fast = compiled.FastTarget(target)
    return target, assistant, fast, compiled.FastDraftStep(assistant, fast.window)


def done_of(events):
    events = list(events)
    return events[0], events[-1]


@pytest.mark.slow
@pytest.mark.parametrize("prompt", PROMPTS)
def test_compiled_greedy_is_transformers_greedy(pair, prompt):
    target, assistant, fast, step = pair
    reference = greedy_reference(target, prompt, N)
    start, spec = done_of(engine.speculative(fast, MTPDrafter(assistant, target, step), prompt, max_new_tokens=N))
    _, plain = done_of(engine.autoregressive(fast, prompt, max_new_tokens=N))
    assert list(spec.generated_ids) == reference and list(plain.generated_ids) == reference
    assert start.settings["engine"] == "compiled" and not fast.graph.note and not step.graph.note
    assert spec.drafted > 0  # it drafted (and verified at several widths)


@pytest.mark.slow
def test_rejections_and_every_width_stay_lossless(pair):
    """A drafter that is wrong every other step, at draft lengths up to 8 (widths 2..9),
    must not change a token: the static cache's rejected entries are cropped or written over."""
    from factories import ScriptDrafter
    target, _, fast, _ = pair
    prompt = PROMPTS[0]
    reference = greedy_reference(target, prompt, N)
    for k in (1, 2, 4, 8):
        _, d = done_of(engine.speculative(fast, ScriptDrafter(len(prompt), reference, wrong_every=2, vocab=512),
                                          prompt, max_new_tokens=N, draft_tokens=k))
        assert list(d.generated_ids) == reference, k
        assert 0 < d.accepted < d.drafted
    assert {w for _, w, _ in fast.graph.shapes.seconds} >= {2, 3, 5, 9}


@pytest.mark.slow
def test_compile_time_is_kept_off_the_clock(pair):
    """A graph compiled during a run is reported in done.compile_seconds (the shapes'
    own timings), and a run whose graphs exist compiles nothing."""
    target, assistant, _, _ = pair
    fast = compiled.FastTarget(target)   # a fresh one: every shape is new to it
    _, first = done_of(engine.autoregressive(fast, PROMPTS[0], max_new_tokens=8))
    assert first.compile_seconds == pytest.approx(fast.graph.shapes.total) and first.compile_seconds > 0
    _, again = done_of(engine.autoregressive(fast, PROMPTS[0], max_new_tokens=8))
    assert again.compile_seconds == 0 and again.generated_ids == first.generated_ids


@pytest.mark.slow
def test_equal_shapes_never_share_a_graph():
    """Graphs are kept per engine instance and checked only against what a call is
    given (compiled.own_graph). Targets of the same shapes with other weights, another
    sliding window or another activation (a constant traced into the graph, which a
    shared graph with only argument guards would keep) each decode their own greedy
    text, the MTP drafter too, in turns and in one process."""
    prompt = PROMPTS[0]
    targets = [gemma_target(seed=3), gemma_target(seed=4), gemma_target(seed=3, window=8), gemma_target(seed=3)]
    targets[3].config.hidden_activation = "silu"
    for m in targets[3].modules():
        if hasattr(m, "act_fn"):
            m.act_fn = torch.nn.SiLU()
    steps = [gemma_assistant(seed=5), gemma_assistant(seed=6), gemma_assistant(seed=5, window=8),
             gemma_assistant(seed=5)]
    fasts = [compiled.FastTarget(t) for t in targets]
    drafters = [MTPDrafter(a, t, compiled.FastDraftStep(a, f.window)) for a, t, f in zip(steps, targets, fasts)]
    wants = [greedy_reference(t, prompt, N) for t in targets]
    assert len({tuple(w) for w in wants}) == len(targets)  # each change changes the text
    for _ in range(2):
        for fast, drafter, want in zip(fasts, drafters, wants):
            _, plain = done_of(engine.autoregressive(fast, prompt, max_new_tokens=N))
            _, spec = done_of(engine.speculative(fast, drafter, prompt, max_new_tokens=N))
            assert list(plain.generated_ids) == want and list(spec.generated_ids) == want
            assert spec.drafted > 0


@pytest.mark.slow
def test_more_than_eight_graphs_compile_on_another_thread():
    """Dynamo's config is per thread and its default allows 8 graphs a function, past
    which fullgraph fails: the app compiles on worker threads, so the engine's limit
    goes with each compiled function, not with the thread that made it."""
    import threading

    fast = compiled.FastTarget(gemma_target(layers=1))
    shapes = [(w, state) for w in compiled.WIDTHS for state in (False, True)][:9]

    def work():
        for w, state in shapes:
            kv = fast.new_cache(100)
            fast.forward(kv, [5] * w, state, keep=1)
            fast.release(kv)
    worker = threading.Thread(target=work)
    worker.start()
    worker.join()
    assert len(fast.graph.shapes.seconds) == 9 and not fast.graph.note


@pytest.mark.slow
def test_the_multimodal_wrapper_and_mixture_of_experts_compile_losslessly():
    """What E2B/E4B/31B and 26B-A4B load as (Gemma4ForConditionalGeneration, dense and MoE)."""
    prompt = PROMPTS[0]
    for moe in (False, True):
        target, assistant = gemma_multimodal(moe=moe), gemma_assistant()
        fast = compiled.FastTarget(target)
        step = compiled.FastDraftStep(assistant, fast.window)
        _, d = done_of(engine.speculative(fast, MTPDrafter(assistant, target, step), prompt, max_new_tokens=24))
        assert list(d.generated_ids) == greedy_reference(target, prompt, 24), moe
        assert not fast.graph.note and not step.graph.note


@pytest.mark.slow
def test_kv_sharing_and_the_12b_family_compile_losslessly():
    """A target whose last layers reuse earlier layers' K/V (as E2B's do), and the 12B
    family's classes (Gemma4UnifiedForConditionalGeneration, Gemma4UnifiedForCausalLM)
    with their own assistant."""
    from transformers import Gemma4ForCausalLM

    from factories import gemma_text_config, unified_assistant, unified_target
    config = gemma_text_config(layers=6, num_kv_shared_layers=2)
    config.layer_types = ["sliding_attention", "full_attention"] * 3
    torch.manual_seed(0)
    shared = Gemma4ForCausalLM(config).eval()
    assert "reuse" in shared.config.kv_sharing_modes
    prompt = PROMPTS[0]
    for target, assistant in ((shared, gemma_assistant()), (unified_target(), unified_assistant()),
                              (unified_target(wrapper=False), unified_assistant())):
        fast = compiled.FastTarget(target)
        step = compiled.FastDraftStep(assistant, fast.window)
        want = greedy_reference(target, prompt, 32)
        _, d = done_of(engine.speculative(fast, MTPDrafter(assistant, target, step), prompt, max_new_tokens=32))
        _, p = done_of(engine.autoregressive(fast, prompt, max_new_tokens=32))
        assert list(d.generated_ids) == want and list(p.generated_ids) == want, type(target).__name__
        assert not fast.graph.note and not step.graph.note


@pytest.mark.slow
def test_compiled_sampling_preserves_the_distribution():
    from test_sampling import PROMPT, SAMPLING, V, chi2_pvalue, joint_distribution, sample_counts
    target = gemma_target(V, window=16, seed=21, sharpen=6.0, layers=2)
    assistant = gemma_assistant(V, 16, seed=22, k=2)
    fast = compiled.FastTarget(target)
    drafter = MTPDrafter(assistant, target, compiled.FastDraftStep(assistant, fast.window))

    def run(seed):
        return done_of(engine.speculative(fast, drafter, PROMPT, max_new_tokens=4, draft_tokens=2,
                                          sampling=Sampling(seed=seed, **SAMPLING)))[1].generated_ids
    assert chi2_pvalue(sample_counts(run), joint_distribution(target)) > 1e-3


@pytest.mark.slow
def test_no_compiler_is_one_sentence_and_eager_decoding():
    """With no C++ compiler the pair says so in one sentence and decodes eagerly, with
    the same tokens (a model of its own shape, so no graph can come from the disk cache).
    The compiler is taken away through inductor's own ``config.patch``, which puts every
    setting back (undoing a monkeypatch of its config module deleted ``fx_graph_cache``,
    and every later compile in the process failed)."""
    import torch._inductor.config as inductor
    torch._dynamo.reset()
    target, assistant = gemma_target(384, window=16, seed=5, layers=3), gemma_assistant(384, 16, seed=6)
    pair = from_models(target, assistant, word_tokenizer(384))
    with inductor.patch({"cpp.cxx": ("/nonexistent/c++",), "fx_graph_cache": False, "autotune_local_cache": False}):
        note = pair.use("compiled")
    assert note == "Compiling the target failed: no working C++ compiler was found, so it decodes eagerly."
    assert pair.engine == "eager" and pair.compile_note == note and note.count(".") == 1
    start, d = done_of(pair.generate("w5 w6 w7", max_new_tokens=12, chat=False))
    assert start.settings["engine"] == "eager"
    ids = pair.encode("w5 w6 w7", chat=False)
    assert list(d.generated_ids) == greedy_reference(target, ids, 12, eos=pair.eos_token_ids)[:len(d.generated_ids)]
    torch._dynamo.reset()


def test_a_model_the_compiled_engine_does_not_take_is_one_sentence():
    target = llama()
    pair = from_models(target, None, word_tokenizer())
    assert pair.use("compiled") == "The compiled engine takes Gemma 4 targets; LlamaForCausalLM decodes eagerly."
    assert pair.engine == "eager" and pair.decoder.ran.engine == "eager" and pair.decoder.model is target


def test_counting_experts_needs_the_eager_engine(pair):
    _, _, fast, _ = pair
    with pytest.raises(ValueError, match="Counting experts needs the eager engine"):
        list(engine.autoregressive(fast, PROMPTS[0], max_new_tokens=2, experts=True))


def test_widths_and_capacities_bucket():
    assert [compiled.width_for(n) for n in (1, 2, 3, 4, 5, 6, 9, 10, 17, 18)] == [1, 2, 3, 5, 5, 9, 9, 17, 17, 18]
    assert compiled.capacity_for(100) == 256 and compiled.capacity_for(257) == 512
    assert compiled.capacity_for(10_000) is None


def test_the_mask_is_causal_and_windowed():
    m = static.visible(torch.arange(5, 8), 10, window=3)[0, 0]
    assert m.tolist()[0] == [False] * 3 + [True] * 3 + [False] * 4   # query 5 sees keys 3, 4, 5
    assert static.visible(torch.arange(5, 6), 10, None)[0, 0, 0].sum() == 6


def test_the_twin_shares_the_weights_and_keeps_the_targets_attention(pair):
    target, _, fast, _ = pair
    assert all(a is b for a, b in zip(target.parameters(), fast.twin.parameters()))
    assert target.config._attn_implementation != static.ATTENTION
    assert fast.twin.config._attn_implementation == static.ATTENTION


def test_the_twins_linear_layers_are_streamed_and_still_linear(pair):
    """Inside a graph a product of up to 5 rows (float32; one row of bfloat16) is reductions
    inductor writes (no BLAS call), a wider one still BLAS's product; both compute x·Wᵀ + b
    to float rounding; outside a graph it is nn.Linear itself."""
    target, _, fast, _ = pair
    assert {type(m) for m in fast.twin.modules()} >= {static.StreamedLinear}
    assert not any(isinstance(m, static.StreamedLinear) for m in target.modules())
    torch.manual_seed(0)
    layer = torch.nn.Linear(48, 40)
    layer.__class__ = static.StreamedLinear
    graph = torch.compile(layer, fullgraph=True, dynamic=False)
    for shape, dtype, streamed in (((1, 1, 48), torch.float32, True), ((1, 5, 48), torch.float32, True),
                                   ((1, 9, 48), torch.float32, False), ((1, 1, 48), torch.bfloat16, True),
                                   ((1, 3, 48), torch.bfloat16, False)):
        layer.to(dtype)
        x = torch.randn(shape, dtype=dtype)
        want = torch.nn.functional.linear(x.float(), layer.weight.float(), layer.bias.float())
        assert torch.equal(layer(x), torch.nn.functional.linear(x, layer.weight, layer.bias))   # eager: nn.Linear
        got = graph(x)
        with torch.profiler.profile() as prof:
            graph(x)
        blas = {e.name for e in prof.events()} & {"aten::mm", "aten::addmm", "aten::linear"}
        assert bool(blas) != streamed, (shape, dtype, blas)
        assert got.shape == want.shape and got.dtype == dtype
        torch.testing.assert_close(got.float(), want,
                                   **({} if dtype == torch.float32 else {"atol": 2e-2, "rtol": 2e-2}))


@pytest.mark.slow
def test_int8_weights_compiled_are_lossless_against_their_own_plain_decoding():
    """torchao's int8 weight-only target on the engine's kernel: the 20-token prompt's products
    16 rows a call outside a graph, the steps and verifications inside one; MTP's greedy output
    is the same target's plain greedy output."""
    torchao = pytest.importorskip("torchao.quantization")
    from mtp_viz.engine import kernels
    target, assistant = gemma_target(), gemma_assistant()
    torchao.quantize_(target, torchao.Int8WeightOnlyConfig())
    fast = compiled.FastTarget(target)
    on_kernel = [m for m in fast.twin.modules() if isinstance(m, static.StreamedLinear) and m.int8 is not None]
    assert bool(on_kernel) == kernels.load()
    prompt = PROMPTS[0]
    _, plain = done_of(engine.autoregressive(fast, prompt, max_new_tokens=N))
    drafter = MTPDrafter(assistant, target, compiled.FastDraftStep(assistant, fast.window))
    _, spec = done_of(engine.speculative(fast, drafter, prompt, max_new_tokens=N))
    assert list(spec.generated_ids) == list(plain.generated_ids) and spec.drafted > 0
