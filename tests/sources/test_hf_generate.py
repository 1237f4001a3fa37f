"""transformers' own generate, recorded (mtp_viz.sources.hf_generate): the reader's call
and its output unchanged, the events keep the engine's contract, and everything the
recorder sets is gone afterwards."""
import contextlib
import io
import threading
import time

import pytest
import torch
import transformers
from transformers.generation.candidate_generator import SinglePositionMultiTokenCandidateGenerator
from transformers.generation.streamers import BaseStreamer, TextIteratorStreamer, TextStreamer

import mtp_viz
import mtp_viz.prompts
from factories import gemma_assistant, gemma_small_lm, gemma_target
from invariants import check_invariants, generated
from mtp_viz.engine.events import Accepted, Bonus, Drafted, Error, Rejected, Step
from mtp_viz.errors import UserError
from mtp_viz.sources import trace
from mtp_viz.sources.hf_generate import CHECKED_WITH, record
from mtp_viz.sources.recorded import TraceSource

CODE = "def parse(line):\n"
CASES = [(schedule, sample) for schedule in ("constant", "heuristic") for sample in (False, True)]


@pytest.fixture(scope="module")
def tiny():
    return mtp_viz.load_pair("tiny")


@pytest.fixture(scope="module")
def rand():
    """A random target and MTP assistant from configs (tests/factories.py)."""
    return gemma_target(), gemma_assistant(k=4)


@contextlib.contextmanager
def schedule(assistant, name, k=None):
    """The assistant's schedule (and length) for a block; transformers' heuristic writes
    its length back into the config after a call, so both are put back."""
    gc = assistant.generation_config
    old = gc.num_assistant_tokens_schedule, gc.num_assistant_tokens
    gc.num_assistant_tokens_schedule = name
    gc.num_assistant_tokens = k or old[1]
    try:
        yield
    finally:
        gc.num_assistant_tokens_schedule, gc.num_assistant_tokens = old


def generate(model, assistant, ids, *, n=40, sample=False, seed=0, **kw):
    """The reader's unchanged call; seeded before it so with and without the recorder
    draw the same numbers."""
    x = torch.tensor([ids])
    torch.manual_seed(seed)
    return model.generate(x, attention_mask=torch.ones_like(x), assistant_model=assistant,
                          max_new_tokens=n, do_sample=sample, **kw)


def check_recorded(events, out, prompt, n, prefill=True):
    """The engine's invariants, and the accepted and bonus tokens are generate's. With
    the MTP generator (``prefill``) step 1 is the prefill, drafting nothing, as in the
    engine; a draft model's generator drafts before the first target forward."""
    steps = check_invariants(events, n)
    assert generated(events) == out[0, len(prompt):].tolist()
    start = events[0]
    assert start.mode == "speculative" and list(start.prompt_ids) == prompt
    if prefill:
        assert steps[0].draft_tokens == 0 and steps[0].new_tokens == 1
    for e in events:
        if isinstance(e, (Accepted, Rejected, Bonus)):
            assert 0.0 <= e.p <= 1.0 + 1e-6
        if isinstance(e, (Drafted, Accepted, Rejected)):
            assert 0.0 <= e.q <= 1.0 + 1e-6
    assert all(s.draft_seconds >= 0 and s.verify_seconds >= 0 for s in steps)
    assert [s.t for s in steps] == sorted(s.t for s in steps) and events[-1].seconds >= steps[-1].t
    return steps


def untouched(model, assistant):
    """Nothing of the recorder is left on the reader's objects."""
    assert "generate" not in model.__dict__ and "_get_candidate_generator" not in model.__dict__
    assert not assistant._forward_pre_hooks


@pytest.mark.parametrize("sched,sample", CASES)
def test_tiny_pair_output_unchanged_and_events_are_the_run(tiny, sched, sample):
    t, a = tiny.target, tiny.drafter_model
    ids = tiny.encode(CODE, chat=False)
    with schedule(a, sched):
        ref = generate(t, a, ids, sample=sample, seed=3)
    with schedule(a, sched), record(t, tokenizer=tiny.tokenizer) as rec:
        out = generate(t, a, ids, sample=sample, seed=3)
    assert torch.equal(ref, out)
    untouched(t, a)
    steps = check_recorded(rec.events, out, ids, 40)
    s = rec.events[0].settings
    assert s["source"] == "transformers generate" and s["transformers"] == transformers.__version__
    assert (s["schedule"], s["do_sample"], s["num_assistant_tokens"], s["drafter"]) == (
        sched, sample, a.generation_config.num_assistant_tokens, "mtp")
    assert s["temperature"] == (1.0 if sample else 0.0)
    done = rec.events[-1]
    assert done.text == tiny.tokenizer.decode(out[0, len(ids):]) and done.stop_reason == "max_new_tokens"
    assert done.drafter_forwards == done.drafted == sum(x.draft_tokens for x in steps)  # one forward per draft
    assert "".join(e.text for e in rec.events if isinstance(e, (Accepted, Bonus))) == done.text


def transformers_crop(shared_kv: dict, drop: int) -> dict:
    """transformers 5.24's crop of the drafter's shared KV after a rejection: every layer type cut to the verified
    length (``[:current_length]``), which leaves a sliding-window KV shorter than that untouched
    (benchmarks/stale_kv.py's ``transformers`` variant)."""
    n = shared_kv["full_attention"][0].shape[-2] - drop
    return {t: (k[:, :, :n], v[:, :, :n]) for t, (k, v) in shared_kv.items()}


def test_the_recorded_drafts_and_verdicts_are_the_engines_with_transformers_kv(tiny, monkeypatch):
    """An independent check of what the recorder reads: mtp-viz's engine handed the drafter KV
    transformers 5.24 keeps after a rejection (stale_kv=True: the first rejected draft's entry; and,
    past the sliding window, every rejected draft's entry in the sliding layers, which the bundled
    drafter's sliding layer reads) drafts the same tokens, keeps the same ones and gives the same
    probabilities, step by step."""
    from mtp_viz.engine import loop
    from mtp_viz.engine.schedules import make_schedule
    t, a = tiny.target, tiny.drafter_model
    assert "sliding_attention" in a.config.text_config.layer_types   # so the sliding crop is exercised
    prompt = mtp_viz.prompts.load_prompts(mtp_viz.prompts.code_suite())[1].text
    with schedule(a, "constant", 4), record(t) as rec:
        generate(t, a, tiny.encode(prompt, chat=False), n=64)
    monkeypatch.setattr(loop, "crop_shared_kv", transformers_crop)
    ours = list(tiny.generate(prompt, draft_tokens=4, schedule=make_schedule("constant", 4, 16), max_new_tokens=64,
                              chat=False, stale_kv=True))
    assert len(tiny.encode(prompt, chat=False)) + 64 > a.config.text_config.sliding_window  # past the window

    def seen(events):
        return [(e.type, e.step, getattr(e, "index", 0), getattr(e, "token_id", getattr(e, "accepted", 0)))
                for e in events if e.type not in ("start", "done")]
    assert seen(rec.events) == seen(ours) and any(e.type == "rejected" for e in ours)
    for x, y in zip(rec.events[1:-1], ours[1:-1]):
        assert getattr(x, "p", 0) == pytest.approx(getattr(y, "p", 0), abs=1e-4)
        assert getattr(x, "q", 0) == pytest.approx(getattr(y, "q", 0), abs=1e-4)


def test_the_mtp_generator_keeps_its_draft_length_under_the_heuristic_schedule(tiny):
    """What transformers 5.24 does: the MTP candidate generator inherits a no-op
    update_candidate_strategy, so "heuristic" drafts the configured length every step."""
    t, a = tiny.target, tiny.drafter_model
    with schedule(a, "heuristic", 3), record(t) as rec:
        generate(t, a, tiny.encode(CODE, chat=False), n=64)
    steps = [s for s in rec.events if isinstance(s, Step)]
    made = [sum(s.new_tokens for s in steps[:i]) for i in range(len(steps))]
    # every step drafts 3, or what is left before the token limit (the bonus needs one)
    assert [s.draft_tokens for s in steps[1:]] == [min(3, 64 - m - 1) for m in made[1:]]
    assert {s.reason for s in steps} == {"num_assistant_tokens unchanged"}
    assert any(s.accepted == s.draft_tokens == 3 for s in rec.events if isinstance(s, Step))  # "+2" was due


def test_a_draft_model_assistant_moves_its_length_under_the_heuristic(rand):
    """Positive control: with an independent draft model (AssistedCandidateGenerator)
    transformers' heuristic works, and the recorded draft lengths and reasons show it."""
    t, small = rand[0], gemma_small_lm()
    ids = list(range(10, 30))
    for sample in (False, True):
        with schedule(small, "heuristic", 6):
            ref = generate(t, small, ids, sample=sample, n=24)
        with schedule(small, "heuristic", 6), record(t) as rec:
            out = generate(t, small, ids, sample=sample, n=24)
        assert torch.equal(ref, out)
        steps = check_recorded(rec.events, out, ids, 24, prefill=False)
        assert rec.events[0].settings["drafter"] == "model"
        assert len({s.draft_tokens for s in steps[1:]}) > 1
        assert any(s.reason == "num_assistant_tokens -1" for s in steps)
        untouched(t, small)


def conditional_generation_target():
    """The multimodal wrapper real Gemma 4 checkpoints load as (towers left out)."""
    text = gemma_target().config
    return transformers.Gemma4ForConditionalGeneration(transformers.Gemma4Config(
        text_config=text.to_dict(), vision_config=None, audio_config=None)).eval()


@pytest.mark.parametrize("kind", ["causal", "ordered", "conditional"])
@pytest.mark.parametrize("sample", [False, True])
def test_random_pairs_from_configs(rand, kind, sample):
    """Random pairs: almost every draft rejected greedy; a prompt past the sliding
    window; the clustered head; the class real checkpoints load as."""
    t, a = rand
    if kind == "ordered":
        a = gemma_assistant(ordered=True, k=4)
    if kind == "conditional":
        t = conditional_generation_target()
    ids = [(7 * i) % 500 + 4 for i in range(24)]   # longer than the window of 16
    ref = generate(t, a, ids, sample=sample, n=20, seed=5)
    with record(t) as rec:
        out = generate(t, a, ids, sample=sample, n=20, seed=5)
    assert torch.equal(ref, out)
    check_recorded(rec.events, out, ids, 20)
    assert any(isinstance(e, Rejected) for e in rec.events) or sample
    untouched(t, a)


def test_the_trace_round_trip_and_the_views(tiny, tmp_path):
    """What the app's download writes (trace.write) and its upload reads
    (TraceSource.read) gives back the recorded run, which the app's views draw."""
    t, a = tiny.target, tiny.drafter_model
    for sample in (False, True):
        with record(t, tokenizer=tiny.tokenizer) as rec:
            generate(t, a, tiny.encode(CODE, chat=False), sample=sample)
        path = trace.write(tmp_path / f"rec-{sample}.jsonl", rec.events, title="recorded")
        assert trace.read(path) == rec.events
        assert [e for _, e in TraceSource.read(path).runs()] == rec.events
        assert [e for _, e in rec.source.runs()] == rec.events and rec.source.modes == ("speculative",)
    from mtp_viz.views import charts, export, stats
    assert stats.run_stats(rec.events).tokens == rec.events[-1].new_tokens
    assert len(export.steps_csv(rec.events).splitlines()) == rec.events[-1].target_forwards + 1
    assert charts.all_figures(rec.events)


def eos_inside_a_step(events):
    """A token kept as a draft, not the step's last kept token, whose first occurrence
    in the generated tokens it is: made the end-of-sequence token, it cuts that step."""
    gen = generated(events)
    pos = 0
    for e in events:
        if isinstance(e, Accepted) and gen.index(e.token_id) == pos and e.token_id > 3:
            return e.token_id, e.step
        if isinstance(e, (Accepted, Bonus)):
            pos += 1
    raise AssertionError("no draft to cut at")


@pytest.mark.parametrize("sample", [False, True])
def test_an_end_of_sequence_draft_cuts_its_step(tiny, sample):
    t, a = tiny.target, tiny.drafter_model
    ids = tiny.encode(CODE, chat=False)
    with record(t) as first:
        generate(t, a, ids, sample=sample, seed=11)
    eos, step = eos_inside_a_step(first.events)
    agreed_before = next(s.accepted for s in first.events if isinstance(s, Step) and s.step == step)
    ref = generate(t, a, ids, sample=sample, seed=11, eos_token_id=eos)
    with record(t) as rec:
        out = generate(t, a, ids, sample=sample, seed=11, eos_token_id=eos)
    assert torch.equal(ref, out) and out[0, -1].item() == eos
    steps = check_recorded(rec.events, out, ids, 40)
    last = steps[-1]
    assert last.step == step and last.cut == "eos" and rec.events[-1].stop_reason == "eos"
    rejected = [e.index for e in rec.events if isinstance(e, Rejected) and e.step == step]
    if sample:  # the accept rule's random draws after the cut are unknown: nothing claimed
        assert last.agreed == last.accepted and rejected == []
    else:       # greedy: recomputed from the logits, as the uncut run agreed
        assert last.agreed == agreed_before >= last.accepted
        assert rejected == list(range(last.agreed, last.draft_tokens))


class Collect(BaseStreamer):
    def __init__(self, fail_at=0, sleep=0.0):
        self.puts, self.ends, self.fail_at, self.sleep = [], 0, fail_at, sleep

    def put(self, value):
        self.puts.append(value.tolist())
        time.sleep(self.sleep)
        if len(self.puts) == self.fail_at:
            raise RuntimeError("the reader's streamer broke")

    def end(self):
        self.ends += 1


def test_the_readers_streamer_still_gets_every_token(tiny):
    t, a = tiny.target, tiny.drafter_model
    ids = tiny.encode(CODE, chat=False)
    plain, recorded = Collect(), Collect()
    generate(t, a, ids, streamer=plain)
    with record(t) as rec:
        out = generate(t, a, ids, streamer=recorded)
    assert recorded.puts == plain.puts and recorded.ends == plain.ends == 1
    steps = [[e.token_id for e in rec.events if isinstance(e, (Accepted, Bonus)) and e.step == s.step]
             for s in rec.events if isinstance(s, Step)]
    assert recorded.puts[1:] == [[x] for x in steps] and recorded.puts[0] == [ids]
    buf = io.StringIO()   # transformers' own text streamer prints the same text
    with contextlib.redirect_stdout(buf), record(t):
        generate(t, a, ids, streamer=TextStreamer(tiny.tokenizer, skip_prompt=True))
    assert buf.getvalue().rstrip("\n") == tiny.tokenizer.decode(out[0, len(ids):]).rstrip("\n")


def test_a_generate_on_another_thread_with_an_iterator_streamer(tiny):
    """The notebook pattern: generate on a thread, the text read from a TextIteratorStreamer."""
    t, a = tiny.target, tiny.drafter_model
    ids = tiny.encode(CODE, chat=False)
    streamer = TextIteratorStreamer(tiny.tokenizer, skip_prompt=True)
    result = {}
    with record(t, tokenizer=tiny.tokenizer) as rec:
        th = threading.Thread(target=lambda: result.update(out=generate(t, a, ids, streamer=streamer)))
        th.start()
        text = "".join(streamer)
        th.join()
    check_recorded(rec.events, result["out"], ids, 40)
    assert text == rec.events[-1].text


def test_the_readers_streamer_time_is_kept_off_the_recorded_clock(tiny):
    t, a = tiny.target, tiny.drafter_model
    slow = Collect(sleep=0.02)
    with record(t) as rec:
        t0 = time.perf_counter()
        generate(t, a, tiny.encode(CODE, chat=False), streamer=slow)
        wall = time.perf_counter() - t0
    # every put after the prompt's falls inside the recorded interval, and is taken off it
    assert rec.events[-1].seconds <= wall - 0.02 * (len(slow.puts) - 1)


def test_everything_is_restored_when_generate_raises(tiny):
    t, a = tiny.target, tiny.drafter_model
    ids = tiny.encode(CODE, chat=False)
    ref = generate(t, a, ids)
    with pytest.raises(RuntimeError, match="streamer broke"):
        with record(t) as rec:
            generate(t, a, ids, streamer=Collect(fail_at=3))
    untouched(t, a)
    assert isinstance(rec.events[-1], Error) and "RuntimeError" in rec.events[-1].message
    assert torch.equal(generate(t, a, ids), ref)
    with record(t) as again:   # and a new recording works
        generate(t, a, ids)
    check_recorded(again.events, ref, ids, 40)


def test_calls_without_an_assistant_record_nothing(tiny):
    t, a = tiny.target, tiny.drafter_model
    ids = tiny.encode(CODE, chat=False)
    x = torch.tensor([ids])
    ref = t.generate(x, attention_mask=torch.ones_like(x), max_new_tokens=8, do_sample=False)
    with record(t) as rec:
        out = t.generate(x, attention_mask=torch.ones_like(x), max_new_tokens=8, do_sample=False)
        assert torch.equal(ref, out) and rec.events == [] and rec.calls == []
        with pytest.raises(UserError, match="Nothing was recorded"):
            rec.source
        with pytest.raises(UserError, match="Nothing was recorded"):
            mtp_viz.show(rec)
        generate(t, a, ids, n=8)
        generate(t, a, ids, n=12)
    assert [c[-1].new_tokens for c in rec.calls] == [8, 12] and rec.events is rec.calls[-1]


def test_one_recording_per_model(tiny):
    t = tiny.target
    with record(t):
        with pytest.raises(UserError, match="already being recorded"):
            with record(t):
                pass
    assert "generate" not in t.__dict__


def one_sentence(err):
    text = str(err.value)
    assert text.count(". ") == 0 and text.endswith(".") and CHECKED_WITH in text
    return text


def test_a_missing_model_hook_is_one_sentence():
    """A transformers whose models lack _get_candidate_generator: simulated on a
    subclass instance that has the attribute removed."""
    class Older(transformers.Gemma4ForCausalLM):
        _get_candidate_generator = None
    model = gemma_target()
    model.__class__ = Older
    with pytest.raises(UserError) as err:
        with record(model):
            pass
    assert "_get_candidate_generator" in one_sentence(err)
    untouched(model, gemma_assistant())


def test_a_missing_generator_hook_is_one_sentence(rand):
    """A candidate generator without update_candidate_strategy: the generate call stops
    with one sentence before it decodes, and nothing is left behind."""
    class OlderGenerator(SinglePositionMultiTokenCandidateGenerator):
        update_candidate_strategy = None

    class Gemma4Target(transformers.Gemma4ForCausalLM):
        def _get_candidate_generator(self, *args, **kwargs):
            generator = super()._get_candidate_generator(*args, **kwargs)
            generator.__class__ = OlderGenerator
            return generator
    t, a = gemma_target(), rand[1]
    t.__class__ = Gemma4Target
    with pytest.raises(UserError) as err:
        with record(t):
            generate(t, a, [5, 6, 7], n=4)
    assert "update_candidate_strategy" in one_sentence(err)
    untouched(t, a)


def test_the_public_name():
    assert mtp_viz.record is record and "record" in mtp_viz.__all__


def test_show_draws_the_recorded_call_and_save_writes_a_trace_the_reader_reads(tmp_path, capsys):
    """Without a tokenizer given, the one saved where the model was loaded from fills
    the text; mtp_viz.show(rec) prints it (no notebook here), rec.save() writes a trace
    whose events read back equal."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    import mtp_viz
    from mtp_viz.sources import trace
    from mtp_viz.sources.presets import resolve
    target_dir, drafter_dir = resolve("tiny")
    target, drafter = (AutoModelForCausalLM.from_pretrained(target_dir),
                       AutoModelForCausalLM.from_pretrained(drafter_dir))
    ids = AutoTokenizer.from_pretrained(target_dir)("def parse(line):\n", return_tensors="pt")
    with mtp_viz.record(target) as rec:
        out = target.generate(**ids, assistant_model=drafter, max_new_tokens=20, do_sample=False)
    shown = mtp_viz.show(rec)
    text = "".join(e.text for e in shown if e.type in ("accepted", "bonus"))
    assert text and capsys.readouterr().out.startswith(text)
    assert AutoTokenizer.from_pretrained(target_dir).decode(out[0, ids["input_ids"].shape[-1]:]) == text
    path = rec.save(tmp_path / "recorded.jsonl")
    assert trace.read(path) == rec.events
