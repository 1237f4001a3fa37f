"""A pair's cost profile: what each kind of forward costs here, and whole runs at set acceptance.

For each engine (eager; compiled with ``engines=("eager", "compiled")``) it times, on the
run's own clock (:func:`mtp_viz.sources.interleave.own_clock`), medians of ``repeats``:

- ``plain``: the target's plain step, one token over the cache, no state (what plain
  decoding pays per token);
- ``verify[w]``: the target over w tokens with the state MTP reads (last hidden state,
  shared K/V), for every width w = 1 .. γ_max + 1 a verification of γ drafts uses (the
  compiled engine pads w up to its graph widths: what it pays);
- ``draft``: one draft of the drafter (the MTP assistant over the target's real state),
  the mean over γ_max drafts of one proposal;
- ``prefill``: the prompt's forward, per prompt token.

Widths take turns within each repeat, so drift falls on all of them. Each timed forward
over a cache of the prompt's length adds one position (as a verification whose drafts
were all rejected does), so every width is timed at about the same context.

Then whole runs, end to end: plain decoding, and speculative decoding with the real
drafter but a set acceptance α (:class:`mtp_viz.engine.drafters.scripted.ScriptedDrafter`:
every forward real), for each α of ``alphas``; their speedups over the fastest plain
decoder of the profile are what :mod:`mtp_viz.analysis.payoff` predicted from the costs.
Where the weights are real, the pair's own acceptance on the prompt is measured too.

Beside the set acceptances, the published ones (:mod:`mtp_viz.analysis.published`): the
predicted speedup of each engine's costs at the α of every figure of the shipped table, each
row labelled with the model size it was published for and ``same_model`` only where that is
the profiled pair's size.
"""
from __future__ import annotations

import dataclasses
import resource
import statistics
import time
from dataclasses import dataclass, field
from typing import Any, Callable

ALPHAS = (0.5, 0.7, 0.9)
PROFILED_DRAFT_TOKENS = 8   # the longest draft the profile times by default


@dataclass(frozen=True)
class Costs:
    """One engine's per-forward costs, seconds (medians)."""
    engine: str
    plain: float
    verify: dict[int, float]              # width (drafts + 1) -> seconds
    draft: float | None                   # one draft; None without an MTP drafter
    prefill_per_token: float
    compile_seconds: float = 0.0          # the engine's graphs (compiled engine), wall seconds
    samples: dict[str, list[float]] = field(default_factory=dict)   # every timing, for a reader to check

    def as_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d["verify"] = {str(w): s for w, s in self.verify.items()}
        return d


@dataclass(frozen=True)
class Run:
    """One whole run's medians: plain (``alpha`` None) or speculative at a set acceptance."""
    engine: str
    alpha: float | None
    draft_tokens: int
    tokens_per_second: float
    seconds: list[float]                   # each repeat's
    acceptance: float | None = None        # drafts kept ÷ drafts made
    same_tokens: bool = True               # the plain run's tokens (greedy: lossless)
    label: str = ""
    realized_alpha: float | None = None    # α by maximum likelihood over every repeat's steps (the draws' luck)

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def _sync(device: str) -> None:
    if str(device).startswith("cuda"):
        import torch
        torch.cuda.synchronize()


def _timed(clock: Callable[[], float], device: str, fn):
    _sync(device)
    t = clock()
    out = fn()
    _sync(device)
    return out, clock() - t


def peak_memory(device: str) -> int:
    """The most bytes this process has held: the CPU's peak resident set (``ru_maxrss``,
    KiB on Linux), or the accelerator's peak allocation."""
    if str(device).startswith("cuda"):
        import torch
        return int(torch.cuda.max_memory_allocated())
    return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * 1024


def _check(stop: Any) -> None:
    """Between two timed parts: a set ``stop`` (a :class:`threading.Event`) ends the profile."""
    if stop is not None and stop.is_set():
        from mtp_viz.errors import UserError
        raise UserError("The profile was stopped.")


def costs(pair: Any, engine: str, prompt_ids: list[int], max_draft_tokens: int, repeats: int,
          clock: Callable[[], float], stop: Any = None) -> Costs:
    """The per-forward costs of ``pair`` on its decoder (see the module's docstring); the
    first pass over every shape is untimed (a compiled graph's first call compiles it)."""
    from mtp_viz.engine.drafters.base import DraftContext
    from mtp_viz.engine.loop import _picker
    from mtp_viz.engine.sampling import Sampler, Sampling
    dec, device = pair.decoder, pair.device
    widths = list(range(1, max_draft_tokens + 2))
    drafter = pair.make_drafter("mtp") if pair.has_mtp else None
    pick = _picker(Sampler(Sampling(), device=device))
    samples: dict[str, list[float]] = {"prefill": [], "plain": [], "draft": [], **{f"verify{w}": [] for w in widths}}
    passes = repeats + 1
    need = len(prompt_ids) + passes * (len(widths) + 1) + max_draft_tokens + 2
    for r in range(passes):  # a session per pass: the prefill is timed on a new cache each time
        _check(stop)
        with dec.open(need) as kv:
            fwd, t = _timed(clock, device, lambda: kv.forward(prompt_ids, True, keep=1, prefill=True))
            kv.crop(0)
            ids = list(prompt_ids) + [int(fwd.logits[-1].argmax())]
            timed = r > 0
            if timed:
                samples["prefill"].append(t / len(prompt_ids))
            order = [0] + widths
            order = order[r % len(order):] + order[:r % len(order)]   # turns rotate from pass to pass
            for w in order:
                want = w > 0
                f, t = _timed(clock, device, lambda: kv.forward(ids[-1:] * max(w, 1), want, keep=max(w, 1)))
                kv.crop(max(w, 1) - 1)   # keep the newest token's entry: the cache grows by one
                ids.append(int(f.logits[0].argmax()))
                if timed:
                    samples[f"verify{w}" if want else "plain"].append(t)
                if want and w == 1 and drafter is not None:
                    ctx = DraftContext(ids[:-1] + [ids[-1]], hidden=f.hidden[:, :1], shared_kv=f.shared_kv)
                    p, t = _timed(clock, device,
                                  lambda: drafter.propose(ctx, max_draft_tokens, pick, lambda i, q: True))
                    if timed:
                        samples["draft"].append((t - p.compile_seconds) / max(len(p.tokens), 1))
    med = {k: statistics.median(v) for k, v in samples.items() if v}
    return Costs(engine, med["plain"], {w: med[f"verify{w}"] for w in widths}, med.get("draft"),
                 med["prefill"], round(getattr(pair, "compile_seconds", 0.0), 3), samples)


def runs(pair: Any, engine: str, prompt_ids: list[int], n: int, draft_tokens: int, alphas, repeats: int,
         clock_for: Callable[[], Any], seed: int = 0, stop: Any = None) -> list[Run]:
    """Whole greedy runs of ``n`` tokens: plain, then the MTP drafter at each set α,
    ``repeats`` times in rotated turns after one untimed warm-up of each."""
    from mtp_viz.engine import loop
    from mtp_viz.engine.config import text_config
    from mtp_viz.engine.drafters.scripted import ScriptedDrafter
    vocab = text_config(pair.target.config).vocab_size

    def plain(clock):
        return list(loop.autoregressive(pair.decoder, prompt_ids, max_new_tokens=n, clock=clock))

    script = list(plain(time.perf_counter)[-1].generated_ids)    # untimed: the target's own greedy path
    arms: dict[float | None, Callable] = {None: plain}
    for a in (alphas if pair.has_mtp else ()):
        # one drafter per α: its draws go on from run to run, so repeats average their luck
        d = ScriptedDrafter(pair.make_drafter("mtp"), script, len(prompt_ids), a, vocab, seed)

        def spec(clock, d=d):
            return list(loop.speculative(pair.decoder, d, prompt_ids, max_new_tokens=n, draft_tokens=draft_tokens,
                                         clock=clock))
        arms[a] = spec
    for fn in list(arms.values())[1:]:
        _check(stop)
        fn(time.perf_counter)                                  # warm-up (and any graph left to compile)
    done: dict[float | None, list] = {a: [] for a in arms}
    keys = list(arms)
    for r in range(repeats):
        for a in keys[r % len(keys):] + keys[:r % len(keys)]:
            _check(stop)
            done[a].append(arms[a](clock_for()))
    out = []
    for a, streams in done.items():
        ds = [events[-1] for events in streams]
        secs = [d.seconds for d in ds]
        tps = statistics.median(d.new_tokens / d.seconds for d in ds if d.seconds > 0)
        acc = statistics.median(d.acceptance_rate for d in ds) if a is not None else None
        same = all(list(d.generated_ids) == script for d in ds)
        label = "" if a is None else f"acceptance set to {a:g}; every forward real"
        realized = _alpha_of([e for events in streams for e in events]) if a is not None else None
        out.append(Run(engine, a, draft_tokens if a is not None else 0, tps, secs, acc, same, label, realized))
    return out


def _alpha_of(events) -> float:
    """α by maximum likelihood (:func:`mtp_viz.engine.theory.alpha_mle`) over the steps of ``events``."""
    from mtp_viz.engine import theory
    from mtp_viz.engine.events import Step
    steps = [e for e in events if isinstance(e, Step) and e.draft_tokens]
    return theory.alpha_mle(sum(s.agreed for s in steps), sum(1 for s in steps if s.agreed < s.draft_tokens))


def own_acceptance(pair: Any, prompt_ids: list[int], n: int, draft_tokens: int) -> dict[str, Any]:
    """The real drafter's acceptance on the prompt (greedy, ``draft_tokens`` drafts): drafts kept
    and made, the steps that rejected one, α by maximum likelihood and τ."""
    from mtp_viz.engine import loop, theory
    from mtp_viz.engine.events import Done, Step
    events = list(loop.speculative(pair.decoder, pair.make_drafter("mtp"), prompt_ids, max_new_tokens=n,
                                   draft_tokens=draft_tokens))
    steps = [e for e in events if isinstance(e, Step) and e.draft_tokens]
    drafted, agreed = sum(s.draft_tokens for s in steps), sum(s.agreed for s in steps)
    rejections = sum(1 for s in steps if s.agreed < s.draft_tokens)
    done = events[-1]
    assert isinstance(done, Done)
    return {"draft_tokens": draft_tokens, "drafted": drafted, "accepted": agreed, "rejections": rejections,
            "alpha": theory.alpha_mle(agreed, rejections),
            "tau": done.tau}


def prompt_ids(pair: Any, tokens: int) -> list[int]:
    """A prompt of exactly ``tokens`` ids: the bundled suite's first prompt, repeated as
    needed and cut (the text itself does not change a forward's cost)."""
    from mtp_viz.prompts import load_prompts
    base = pair.encode(load_prompts(None, None, 0)[0].text, chat=False)
    return (base * (tokens // max(len(base), 1) + 1))[:tokens]


def study(pairs: dict[str, Any], *, prompt_tokens: int = 32, new_tokens: int = 64, draft_tokens: int = 4,
          max_draft_tokens: int = PROFILED_DRAFT_TOKENS, alphas=ALPHAS, repeats: int = 3, seed: int = 0,
          stop: Any = None) -> dict[str, Any]:
    """The whole profile of one model pair on each engine of ``pairs`` (engine name -> the
    pair on it), JSON-ready: costs, whole runs, predictions (:mod:`mtp_viz.analysis.payoff`)
    and, for real weights, the pair's own acceptance. A set ``stop`` (a threading.Event)
    ends it between two timed parts with one sentence (UserError)."""
    from mtp_viz.analysis import payoff, published
    from mtp_viz.sources.interleave import own_clock, running_clock
    first = next(iter(pairs.values()))
    figures = published.load()   # before any timing: a bad table is one sentence at once
    size = published.model_size(getattr(first, "name", ""))
    ids = prompt_ids(first, prompt_tokens)
    now, basis = own_clock(first.device)
    measured = {e: costs(p, e, ids, max_draft_tokens, repeats, now, stop) for e, p in pairs.items()}
    whole = {e: runs(p, e, ids, new_tokens, draft_tokens, alphas, repeats, lambda p=p: running_clock(p.device),
                     seed, stop)
             for e, p in pairs.items()}
    fastest = min(measured.values(), key=lambda c: c.plain)
    plain_runs = {e: next(r for r in rs if r.alpha is None) for e, rs in whole.items()}
    fastest_run = max(plain_runs.values(), key=lambda r: r.tokens_per_second)
    engines = {}
    for e, c in measured.items():
        entry: dict[str, Any] = {"costs": c.as_dict()}
        if c.draft is not None:
            entry["prediction"] = payoff.curves(fastest.plain, c.verify, c.draft, payoff.grid())
            entry["published"] = [r.as_dict() for r in published.rows(fastest.plain, c.verify, c.draft,
                                                                      draft_tokens, size, figures)]
            rows = []
            for r in whole[e]:
                if r.alpha is None:
                    continue
                predicted = payoff.run_speedup(r.alpha, draft_tokens, new_tokens, fastest.plain,
                                               fastest.prefill_per_token * len(ids), c.verify, c.draft,
                                               c.prefill_per_token * len(ids))
                at_realized = payoff.run_speedup(r.realized_alpha, draft_tokens, new_tokens, fastest.plain,
                                                 fastest.prefill_per_token * len(ids), c.verify, c.draft,
                                                 c.prefill_per_token * len(ids))
                got = r.tokens_per_second / fastest_run.tokens_per_second
                rows.append({**r.as_dict(), "speedup": got, "predicted": predicted, "measured_over_predicted":
                             got / predicted, "predicted_at_realized_alpha": at_realized})
            entry["runs"] = rows
        entry["plain_run"] = plain_runs[e].as_dict()
        engines[e] = entry
    own = None
    if getattr(first, "weights", "real") == "real" and first.has_mtp:
        _check(stop)
        own = own_acceptance(first, ids, new_tokens, draft_tokens)
    return {"meta": {"prompt_tokens": len(ids), "new_tokens": new_tokens, "draft_tokens": draft_tokens,
                     "max_draft_tokens": max_draft_tokens, "alphas": list(alphas), "repeats": repeats, "clock": basis,
                     "peak_memory_bytes": peak_memory(first.device)},
            "engines": engines, "fastest_plain": {"engine": fastest.engine, "step_seconds": fastest.plain,
                                                  "run_engine": fastest_run.engine,
                                                  "run_tokens_per_second": fastest_run.tokens_per_second},
            "own_acceptance": own,
            "published": {"model_size": size, "doc": published.DOC, "conversion": dict(published.CONVERSION),
                          "notes": [dataclasses.asdict(n) for n in published.notes()]}}


def describe(result: dict[str, Any], pair: Any, target: str) -> dict[str, Any]:
    """``result``'s meta given what it profiled and where: the target's name, its weights
    (random: labelled), the shape's origin, the device, the precisions and the machine
    (:mod:`mtp_viz.measure.machine`). The CLI's and the app's profiles alike."""
    from mtp_viz.measure import machine
    m = machine.machine()
    result["meta"].update(target=target, weights=pair.weights, weights_label=pair.weights_label,
                          shape_origin=pair.shape_origin, device=pair.device, host=m,
                          precision=f"target {pair.precision['target']}, drafter {pair.precision['drafter']}",
                          machine_line=machine.line(m))
    return result


__all__ = ["ALPHAS", "Costs", "PROFILED_DRAFT_TOKENS", "Run", "costs", "describe", "own_acceptance", "peak_memory",
           "prompt_ids", "runs", "study"]
