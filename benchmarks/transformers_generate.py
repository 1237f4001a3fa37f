"""What transformers' own generate(assistant_model=...) does with the bundled MTP drafter,
recorded with ``mtp_viz.record``, beside mtp-viz's engine on the same prompts and settings.

(a) Draft length: does transformers' ``num_assistant_tokens_schedule = "heuristic"`` move
    the draft length with this drafter (the recorded ``draft_tokens`` of every step), against
    "constant", and what mtp-viz's heuristic schedule drafts on the same prompts.
(b) Sampling: transformers drafts by argmax but scores the drafts as if sampled; its
    acceptance (accepted / drafted) and accepted drafts per step under do_sample=True,
    against greedy and against the engine under the same sampling settings.
(c) The recorder's own cost: transformers' greedy call with and without ``record``.

    python benchmarks/transformers_generate.py            # ~2 minutes on one thread

Writes benchmarks/results/transformers-generate/{result.json,result.md}.
"""
from __future__ import annotations

import argparse
import collections
import json
import platform
import statistics
import time
from pathlib import Path

import torch
import transformers

import mtp_viz
from mtp_viz.engine.events import Step
from mtp_viz.engine.schedules import make_schedule
from mtp_viz.prompts import code_suite, load_prompts

OUT = Path(__file__).parent / "results" / "transformers-generate"


def steps_of(events) -> list[Step]:
    return [e for e in events if isinstance(e, Step)]


def run_stats(events, max_new: int) -> dict:
    """Acceptance and draft lengths of one run. The prefill (step 1, nothing drafted) is
    left out of the per-step figures, and so, for the draft lengths, are the steps whose
    length the token limit set (what is left before it, less the bonus)."""
    done, steps = events[-1], steps_of(events)
    made, free = 0, []
    for s in steps:
        if s.draft_tokens and s.draft_tokens < max_new - made - 1:
            free.append(s.draft_tokens)
        made += s.new_tokens
    drafting = [s for s in steps if s.draft_tokens]
    return {"new_tokens": done.new_tokens, "drafted": done.drafted, "accepted": done.accepted,
            "steps": len(drafting), "acceptance": done.accepted / done.drafted if done.drafted else 0.0,
            "accepted_per_step": done.accepted / len(drafting) if drafting else 0.0,
            "tau": done.tau, "draft_lens": [s.draft_tokens for s in drafting],
            "free_draft_lens": free, "seconds": done.seconds}


class Bench:
    def __init__(self, pair, draft_tokens: int, max_new: int):
        self.pair, self.k, self.n = pair, draft_tokens, max_new
        self.gc = pair.drafter_model.generation_config

    def hf(self, ids, *, schedule="constant", sample=False, temperature=1.0, top_k=0, seed=0, recorded=True):
        """transformers' generate, the reader's call, recorded (or not, for (c))."""
        self.gc.num_assistant_tokens, self.gc.num_assistant_tokens_schedule = self.k, schedule
        x = torch.tensor([ids])
        kw = dict(attention_mask=torch.ones_like(x), assistant_model=self.pair.drafter_model,
                  max_new_tokens=self.n, do_sample=sample, pad_token_id=0)
        if sample:
            kw.update(temperature=temperature, top_k=top_k, top_p=1.0)
        torch.manual_seed(seed)
        if not recorded:
            return self.pair.target.generate(x, **kw)
        with mtp_viz.record(self.pair.target) as rec:
            out = self.pair.target.generate(x, **kw)
        assert list(rec.events[-1].generated_ids) == out[0, len(ids):].tolist()
        return rec.events

    def engine(self, prompt, *, schedule="constant", temperature=0.0, seed=None, stale_kv=False):
        """mtp-viz's engine; a fresh schedule per generation, as transformers' MTP
        generator starts from num_assistant_tokens each call."""
        return list(self.pair.generate(prompt, mode="speculative", draft_tokens=self.k,
                                       schedule=make_schedule(schedule, self.k, 16), temperature=temperature,
                                       seed=seed, max_new_tokens=self.n, chat=False, stale_kv=stale_kv))


def summarize(runs: list[dict]) -> dict:
    acc = [r["acceptance"] for r in runs]
    per = [r["accepted_per_step"] for r in runs]
    tpf = [r["tau"] for r in runs]
    lens = [x for r in runs for x in r["draft_lens"]]
    free = [x for r in runs for x in r["free_draft_lens"]]
    drafted, accepted = sum(r["drafted"] for r in runs), sum(r["accepted"] for r in runs)
    return {"runs": len(runs), "acceptance_median": statistics.median(acc), "acceptance_mean": statistics.mean(acc),
            "acceptance_pooled": accepted / drafted if drafted else 0.0,
            "accepted_per_step_median": statistics.median(per), "accepted_per_step_mean": statistics.mean(per),
            "tokens_per_forward_median": statistics.median(tpf),
            "draft_len_min": min(lens), "draft_len_max": max(lens),
            "draft_len_counts": dict(sorted(collections.Counter(lens).items())),
            "free_draft_len_counts": dict(sorted(collections.Counter(free).items())),
            "free_draft_len_mean": statistics.mean(free) if free else 0.0}


def measure(b: Bench, prompts, seeds, temps) -> dict:
    ids = [b.pair.encode(p.text, chat=False) for p in prompts]
    rows: dict[str, list[dict]] = collections.defaultdict(list)
    same = collections.Counter(prompts=len(prompts))
    for p, x in zip(prompts, ids):           # (a) and the greedy side of (b)
        runs = {}
        for sched in ("constant", "heuristic"):
            runs["hf", sched], runs["engine", sched] = b.hf(x, schedule=sched), b.engine(p.text, schedule=sched)
            rows[f"transformers greedy {sched}"].append(run_stats(runs["hf", sched], b.n))
            rows[f"engine greedy {sched}"].append(run_stats(runs["engine", sched], b.n))
        stale = b.engine(p.text, stale_kv=True)   # the drafter KV transformers keeps after a rejection
        rows["engine greedy constant, stale_kv=True"].append(run_stats(stale, b.n))
        hf = runs["hf", "constant"]
        for name, ev in (("stale_kv", stale), ("default", runs["engine", "constant"])):
            same[f"{name}_tokens"] += ev[-1].generated_ids == hf[-1].generated_ids
            same[f"{name}_drafts_and_verdicts"] += verdicts(ev) == verdicts(hf)
    for t in temps:                          # (b): sampling, same settings on both
        for p, x in zip(prompts, ids):
            for seed in seeds:
                rows[f"transformers T={t:g}"].append(run_stats(b.hf(x, sample=True, temperature=t, seed=seed), b.n))
                rows[f"engine T={t:g}"].append(run_stats(b.engine(p.text, temperature=t, seed=seed), b.n))
                if t == 1.0:  # transformers' own default sampling: top_k=50
                    rows["transformers T=1 top_k=50 (its default)"].append(
                        run_stats(b.hf(x, sample=True, temperature=t, top_k=50, seed=seed), b.n))
        print(f"T={t:g} done", flush=True)
    return {name: summarize(r) for name, r in rows.items()}, dict(same)


def verdicts(events) -> list:
    """Every draft, kept or rejected, and every step's counts, in order."""
    return [(e.type, e.step, getattr(e, "index", 0), getattr(e, "token_id", getattr(e, "accepted", 0)))
            for e in events if e.type in ("drafted", "accepted", "rejected", "bonus", "step")]


def overhead(b: Bench, prompts, repeats: int) -> dict:
    """(c): wall seconds of the greedy call recorded ÷ unrecorded, interleaved."""
    ids = [b.pair.encode(p.text, chat=False) for p in prompts]
    ratios = []
    for i in range(repeats):
        for x in ids:
            secs = {}
            for rec in ((True, False) if i % 2 == 0 else (False, True)):
                t = time.perf_counter()
                b.hf(x, recorded=rec)
                secs[rec] = time.perf_counter() - t
            ratios.append(secs[True] / secs[False])
    return {"calls": len(ratios), "recorded_over_plain_median": statistics.median(ratios),
            "min": min(ratios), "max": max(ratios)}


def markdown(res: dict) -> str:
    m = res["meta"]
    lines = [f"# transformers' generate, recorded, beside mtp-viz's engine ({m['pair']} pair)", "",
             f"{m['prompts']} held-out code prompts ({', '.join(m['prompt_files'])}), "
             f"{m['max_new_tokens']} new tokens, "
             f"{m['draft_tokens']} drafts (num_assistant_tokens / draft_tokens), seeds {m['seeds']} for sampling "
             f"(top_k 0 and top_p 1 on both sides unless said), 1 torch thread; transformers {m['transformers']}, "
             f"torch {m['torch']}. Each row's medians and means are over its runs (prompts × seeds). "
             "Acceptance is accepted ÷ drafted of a run; per step counts drafting steps (the prefill left out). "
             "Draft lengths: every drafting step; \"free\" leaves out the steps whose length the token limit set.", "",
             "| run | runs | acceptance median (mean; pooled) | accepted per step median (mean) | tokens per forward "
             "median | draft length min–max | free draft lengths (count) |",
             "|---|---|---|---|---|---|---|"]
    for name, s in res["rows"].items():
        free = ", ".join(f"{k}: {v}" for k, v in s["free_draft_len_counts"].items())
        lines.append(f"| {name} | {s['runs']} | {s['acceptance_median']:.3f} ({s['acceptance_mean']:.3f}; "
                     f"{s['acceptance_pooled']:.3f}) | {s['accepted_per_step_median']:.2f} "
                     f"({s['accepted_per_step_mean']:.2f}) | {s['tokens_per_forward_median']:.2f} | "
                     f"{s['draft_len_min']}–{s['draft_len_max']} | {free} |")
    o, g = res["overhead"], res["greedy_check"]
    lines += ["", f"Greedy check, against the recorded transformers run (greedy, constant) of each of the "
              f"{g['prompts']} prompts: mtp-viz's engine with stale_kv=True (the drafter KV transformers keeps "
              f"after a rejection) gives the same tokens on {g['stale_kv_tokens']} and the same drafts, verdicts "
              f"and steps on {g['stale_kv_drafts_and_verdicts']}; with its default stale_kv=False, the same tokens "
              f"on {g['default_tokens']} and the same drafts on {g['default_drafts_and_verdicts']}.", "",
              f"Recorder cost: transformers' greedy constant call recorded ÷ unrecorded, wall time, median of "
              f"{o['calls']} interleaved calls: ×{o['recorded_over_plain_median']:.3f} "
              f"(min ×{o['min']:.3f}, max ×{o['max']:.3f}).", ""]
    return "\n".join(lines + reading(res)) + "\n"


def reading(res: dict) -> list[str]:
    """What the table says, from its numbers (so a rerun keeps them true)."""
    r = res["rows"]
    hc, hh, eh = r["transformers greedy constant"], r["transformers greedy heuristic"], r["engine greedy heuristic"]
    same = {k: v for k, v in hc.items()} == {k: v for k, v in hh.items()}
    out = ["## Reading", "",
           f"(a) transformers' \"heuristic\" does not move this drafter's length: its free draft lengths are "
           f"{hh['free_draft_len_counts']} (constant: {hc['free_draft_len_counts']}); the two rows are "
           f"{'identical' if same else 'NOT identical'}. SinglePositionMultiTokenCandidateGenerator inherits "
           "CandidateGenerator's no-op update_candidate_strategy in transformers "
           f"{res['meta']['transformers']}, so num_assistant_tokens never changes. mtp-viz's heuristic on the same "
           f"prompts drafts {eh['draft_len_min']}–{eh['draft_len_max']} tokens (mean free length "
           f"{eh['free_draft_len_mean']:.2f}, from {res['meta']['draft_tokens']}).", ""]
    t1, e1 = r.get("transformers T=1"), r.get("engine T=1")
    if t1 and e1:
        line = (f"(b) Sampling at T=1 (top_k 0): transformers accepts {t1['acceptance_median']:.3f} of its drafts "
                f"(median of {t1['runs']} runs; {t1['accepted_per_step_median']:.2f} per step), the engine "
                f"{e1['acceptance_median']:.3f} ({e1['accepted_per_step_median']:.2f} per step); greedy, "
                f"transformers {hc['acceptance_median']:.3f}.")
        t8, e8 = r.get("transformers T=0.8"), r.get("engine T=0.8")
        if t8 and e8:
            line += (f" At T=0.8: transformers {t8['acceptance_median']:.3f}, the engine "
                     f"{e8['acceptance_median']:.3f}.")
        d = r.get("transformers T=1 top_k=50 (its default)")
        if d:
            line += f" With transformers' default top_k=50 at T=1: {d['acceptance_median']:.3f}."
        out += [line, "",
                "transformers drafts the argmax of the assistant's raw logits and accepts draft x with "
                "probability min(1, p(x)/q(x)), q the softmax of those raw logits (no temperature, no top-k) and "
                "p the target's processed distribution; the engine samples each draft from the drafter's "
                "processed q and accepts with the same rule, which keeps the target's distribution. An argmax draft "
                "is the drafter's likeliest token, and sharpening p (a lower temperature, top-k) while q stays "
                "raw raises p/q there further; transformers' acceptance is of drafts the rule was not made for, "
                "and its sampled tokens do not follow the target's distribution (its accept rule assumes drafts "
                "sampled from q), so a higher "
                "acceptance here is not a better run.", ""]
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--prompts", type=int, default=8)
    ap.add_argument("--max-new-tokens", type=int, default=96)
    ap.add_argument("--draft-tokens", type=int, default=4)
    ap.add_argument("--seeds", default="0,1,2,3,4")
    ap.add_argument("--temperatures", default="1.0,0.8")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--out", default=str(OUT))
    args = ap.parse_args()
    torch.set_num_threads(1)
    pair = mtp_viz.load_pair("tiny")
    prompts = load_prompts(code_suite(), default_category="code")[:args.prompts]
    seeds = [int(s) for s in args.seeds.split(",")]
    temps = [float(t) for t in args.temperatures.split(",")]
    b = Bench(pair, args.draft_tokens, args.max_new_tokens)
    gc = pair.drafter_model.generation_config
    saved = gc.num_assistant_tokens, gc.num_assistant_tokens_schedule
    t0 = time.perf_counter()
    try:
        rows, same = measure(b, prompts, seeds, temps)
        cost = overhead(b, prompts, args.repeats)
    finally:
        gc.num_assistant_tokens, gc.num_assistant_tokens_schedule = saved
    res = {"meta": {"pair": "tiny", "prompts": len(prompts), "prompt_files": [p.title for p in prompts],
                    "max_new_tokens": args.max_new_tokens, "draft_tokens": args.draft_tokens, "seeds": seeds,
                    "temperatures": temps, "threads": 1, "transformers": transformers.__version__,
                    "torch": torch.__version__, "python": platform.python_version(),
                    "wall_seconds": round(time.perf_counter() - t0, 1)},
           "rows": rows, "greedy_check": same, "overhead": cost}
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "result.json").write_text(json.dumps(res, indent=1) + "\n")
    (out / "result.md").write_text(markdown(res))
    print(markdown(res))


if __name__ == "__main__":
    main()
