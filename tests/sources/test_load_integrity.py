"""Integrity under load: a pair loaded beside another build is the pair that was asked.

transformers' ``from_pretrained`` sets torch's default dtype (process-wide) and swaps the
``torch.nn.init`` functions while it builds; two overlapping loads restore each other's
state. Before ``engine.build``, a float32 pair loaded beside a bfloat16 one held up to
307 of 330 parameters in bfloat16 while ``pair.precision`` said float32.
"""
import collections
import threading

import pytest
import torch

from mtp_viz.engine.build import building, turn
from mtp_viz.engine.decoding import Sampling
from mtp_viz.engine.events import Accepted, Bonus, Token
from mtp_viz.engine.sampling import Sampler
from mtp_viz.errors import UserError
from mtp_viz.sources.models import load_pair
from mtp_viz.sources.precision import check_loaded

pytestmark = pytest.mark.slow  # loads the bundled pair a dozen times, some beside each other

PROMPT = "def add(a, b):\n    return"


def dtypes(pair) -> collections.Counter:
    return collections.Counter(p.dtype for m in (pair.target, pair.drafter_model) for p in m.parameters())


def greedy(pair, mode="speculative", n=24) -> list[int]:
    return [e.token_id for e in pair.generate(PROMPT, mode=mode, max_new_tokens=n, chat=False)
            if isinstance(e, (Accepted, Bonus, Token))]


@pytest.fixture(scope="module")
def alone():
    """Each precision loaded on its own: what a pair must hold and write."""
    out = {}
    for p in ("float32", "bfloat16"):
        pair = load_pair("tiny", target_precision=p, drafter_precision=p)
        out[p] = (dtypes(pair), greedy(pair))
    return out


@pytest.mark.parametrize("trial", range(3))
def test_two_threads_loading_in_two_precisions_each_get_their_own(alone, trial):
    pairs, errors, go = {}, [], threading.Barrier(2)

    def load(p):
        try:
            go.wait()
            pairs[p] = load_pair("tiny", target_precision=p, drafter_precision=p)
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=load, args=(p,)) for p in ("float32", "bfloat16")]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    for p, pair in pairs.items():
        assert set(dtypes(pair)) == {getattr(torch, p)}, (p, dtypes(pair))
        assert dtypes(pair) == alone[p][0]
        assert pair.precision == {"target": p, "drafter": p}
        assert greedy(pair) == alone[p][1]
    assert torch.get_default_dtype() == torch.float32


def test_an_eager_run_beside_loads_writes_what_it_writes_alone(alone):
    """Eager forwards pass every dtype explicitly: a run needs no turn of its own while
    another visitor's pair loads (in bfloat16, which sets the default dtype meanwhile)."""
    pair = load_pair("tiny")
    stop, errors = threading.Event(), []

    def keep_loading():
        while not stop.is_set():
            try:
                load_pair("tiny", dtype="bfloat16")
            except BaseException as e:  # noqa: BLE001
                errors.append(e)
                return

    loader = threading.Thread(target=keep_loading)
    loader.start()
    try:
        runs = [greedy(pair, mode) for mode in ("speculative", "autoregressive") for _ in range(3)]
    finally:
        stop.set()
        loader.join()
    assert not errors
    assert all(r == alone["float32"][1] for r in runs)


def test_a_sampled_acceptance_draws_in_float32_whatever_the_default_dtype():
    """The accept rule's uniform draw named its dtype: under a bfloat16 default (a load in
    another thread) it used to come out with 8 bits of mantissa."""
    s = Sampling(temperature=1.0, seed=7)
    reference = [Sampler(s, "cpu").uniform() for _ in range(1)][0]
    old = torch.get_default_dtype()
    torch.set_default_dtype(torch.bfloat16)
    try:
        under_bf16 = Sampler(s, "cpu").uniform()
    finally:
        torch.set_default_dtype(old)
    assert under_bf16 == reference


def test_a_model_holding_another_precision_is_one_sentence_not_a_pair():
    pair = load_pair("tiny")
    next(pair.drafter_model.parameters()).data = next(pair.drafter_model.parameters()).data.to(torch.bfloat16)
    with pytest.raises(UserError) as e:
        check_loaded(pair.drafter_model, "float32", "cpu", "tiny")
    assert str(e.value).count(".") == 1 and "did not load in float32: 1 of" in str(e.value)
    check_loaded(pair.target, "float32", "cpu", "tiny")  # the untouched one passes


def test_a_compiled_graph_waits_for_a_build_and_keeps_the_wait_off_the_clock():
    """``turn`` says how long a graph call waited for another thread's build: exactly
    0.0 when none held it (and re-entrantly within one, as a compile calls its graphs)."""
    with turn() as waited:
        assert waited == 0.0
        with turn() as again:
            assert again == 0.0
    held, release, seen = threading.Event(), threading.Event(), []

    def build():
        with building():
            held.set()
            release.wait()

    t = threading.Thread(target=build)
    t.start()
    held.wait()

    def graph_call():
        with turn() as w:
            seen.append(w)

    caller = threading.Thread(target=graph_call)
    caller.start()
    caller.join(0.2)
    assert caller.is_alive() and not seen  # it waits while the build runs
    release.set()
    caller.join()
    t.join()
    assert seen and seen[0] > 0
