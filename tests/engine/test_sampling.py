"""Speculative sampling preserves the target's distribution (chi-squared test).

On a vocabulary of 8 tokens we compute the target's exact joint distribution of the
2nd and 3rd generated tokens (marginal over the 1st) from transformers forwards, with
temperature, top-k and top-p applied by an independent implementation, and compare it
with thousands of seeded engine runs in which both tokens go through drafting,
acceptance, correction and bonus.
"""
import copy

import pytest
import torch
from scipy.stats import chisquare

from factories import gemma_assistant, gemma_target
from mtp_viz.engine import loop as engine
from mtp_viz.engine.drafters.lookup import PromptLookupDrafter
from mtp_viz.engine.drafters.mtp import MTPDrafter
from mtp_viz.engine.sampling import Sampling

V = 8
PROMPT = [3, 5, 4, 6, 3, 5]  # ends with a bigram seen before, so prompt lookup drafts too
SAMPLING = dict(temperature=0.9, top_k=6, top_p=0.95)
RUNS = 2000


def processed(logits, temperature, top_k, top_p):
    """softmax(logits / T), restricted to the top-k, then to the smallest top-p nucleus."""
    probs = torch.softmax(logits.double() / temperature, -1)
    keep = torch.zeros_like(probs, dtype=torch.bool)
    order = probs.argsort(descending=True)
    keep[order[:top_k]] = True
    probs = torch.where(keep, probs, 0.0)
    probs = probs / probs.sum()
    sorted_p, order = probs.sort(descending=True)
    before = sorted_p.cumsum(0) - sorted_p  # mass strictly above each token
    nucleus = torch.zeros_like(keep)
    nucleus[order[before < top_p]] = True
    probs = torch.where(nucleus, probs, 0.0)
    return probs / probs.sum()


@pytest.fixture(scope="module")
def target():
    return gemma_target(V, window=16, seed=21, sharpen=6.0, layers=2)


def joint_distribution(target):
    """P(x2, x3) = sum_x1 p(x1) p(x2 | x1) p(x3 | x1, x2), from full forwards."""
    def dist(ids):
        with torch.no_grad():
            logits = target(torch.tensor([ids])).logits[0, -1]
        return processed(logits, **SAMPLING)
    joint = torch.zeros(V, V, dtype=torch.float64)
    p1 = dist(PROMPT)
    for x1 in range(V):
        if p1[x1] == 0:
            continue
        p2 = dist(PROMPT + [x1])
        for x2 in range(V):
            if p2[x2] > 0:
                joint[x2] += p1[x1] * p2[x2] * dist(PROMPT + [x1, x2])
    return joint


@pytest.fixture(scope="module")
def exact(target):
    return joint_distribution(target)


def sample_counts(run, runs=RUNS):
    counts = torch.zeros(V, V)
    for seed in range(runs):
        ids = run(seed)
        counts[ids[1], ids[2]] += 1
    return counts


def chi2_pvalue(counts, exact):
    expected = exact.flatten() * counts.sum()
    observed = counts.flatten()
    if observed[expected == 0].sum() > 0:
        return 0.0  # a token the target cannot produce: no fit at all
    big = expected >= 5
    obs = torch.cat([observed[big], observed[~big].sum()[None]])
    exp = torch.cat([expected[big], expected[~big].sum()[None]])
    keep = exp > 0
    return chisquare(obs[keep].numpy(), exp[keep].numpy()).pvalue


def speculative_run(target, drafter):
    def run(seed):
        events = engine.speculative(target, drafter, PROMPT, max_new_tokens=4, draft_tokens=2,
                                    sampling=Sampling(seed=seed, **SAMPLING))
        done = list(events)[-1]
        return done.generated_ids
    return run


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["mtp", "lookup", "autoregressive"])
def test_distribution_is_preserved(kind, target, exact):
    if kind == "autoregressive":
        def run(seed):
            events = engine.autoregressive(target, PROMPT, max_new_tokens=3,
                                           sampling=Sampling(seed=seed, **SAMPLING))
            return list(events)[-1].generated_ids
    else:
        drafter = (MTPDrafter(gemma_assistant(V, 16, seed=22, k=2), target) if kind == "mtp"
                   else PromptLookupDrafter(max_ngram=2))
        run = speculative_run(target, drafter)
    counts = sample_counts(run)
    assert chi2_pvalue(counts, exact) > 1e-3


@pytest.mark.slow
def test_distribution_is_preserved_in_bfloat16(target):
    """The same at another precision: a bfloat16 target with a bfloat16 MTP drafter, held
    against the exact distribution of that bfloat16 target (its own full forwards)."""
    low = copy.deepcopy(target).to(torch.bfloat16)
    drafter = MTPDrafter(gemma_assistant(V, 16, seed=22, k=2).to(torch.bfloat16), low)
    counts = sample_counts(speculative_run(low, drafter))
    assert chi2_pvalue(counts, joint_distribution(low)) > 1e-3


@pytest.mark.slow
def test_chi2_catches_a_biased_acceptance_rule(target, exact, monkeypatch):
    """Negative control: accepting every draft (ignoring p/q) is detected."""
    def accept_all(sampler, drafts, q, p, argmax=None):
        return len(drafts), sampler.pick(p[len(drafts)])
    monkeypatch.setattr(engine, "accept", accept_all)
    drafter = MTPDrafter(gemma_assistant(V, 16, seed=22, k=2), target)
    counts = sample_counts(speculative_run(target, drafter), runs=600)
    assert chi2_pvalue(counts, exact) < 1e-6
