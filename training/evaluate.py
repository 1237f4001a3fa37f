"""Measure the bundled pair: greedy speculative decoding at a constant draft length, on held-out code and on prose.

    python -m training.evaluate --out mtp_viz/assets/tiny

Decoding runs through the project's own engine (`mtp_viz.engine.loop.speculative` with
`mtp_viz.engine.drafters.MTPDrafter`), and the figures come from `mtp_viz.analysis.metrics` over its event stream,
so they are the ones the app and `mtp-viz bench` report. Every output is checked against
`target.generate(do_sample=False)` (speculative decoding must not change the output).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from mtp_viz.analysis import metrics
from mtp_viz.engine.drafters.mtp import MTPDrafter
from mtp_viz.engine.events import Done
from mtp_viz.engine.loop import speculative
from mtp_viz.engine.sampling import Sampling

from .models import DEFAULT_DRAFT_TOKENS

# Surprising text for a model trained only on Python source: plain English prose.
PROSE_PROMPTS = [
    "The old lighthouse keeper climbed the spiral stairs every evening, counting the steps as his father had "
    "taught him, and when he reached the lamp room he paused to watch the fishing boats",
    "Autumn came early to the valley that year. The orchards were heavy with apples, and the children who "
    "walked to school along the river road would stop to",
    "She opened the letter slowly, unsure whether she wanted to know what her brother had written after so "
    "many years of silence, and read the first line twice before",
]


def load_pair(out: Path):
    """Tokenizer, target and drafter as the app loads them on a CPU: float32 weights."""
    tok = AutoTokenizer.from_pretrained(out / "target")
    target = AutoModelForCausalLM.from_pretrained(out / "target", dtype=torch.float32).eval()
    drafter = AutoModelForCausalLM.from_pretrained(out / "drafter", dtype=torch.float32).eval()
    return tok, target, drafter


def engine_events(target, drafter, prompt_ids, max_new_tokens: int, eos_id: int, draft_tokens: int) -> list:
    """One greedy generation through the project's engine, as its event stream."""
    return list(speculative(target, MTPDrafter(drafter, target), prompt_ids, max_new_tokens=max_new_tokens,
                            sampling=Sampling(temperature=0.0), schedule="constant", draft_tokens=draft_tokens,
                            eos_token_ids=[eos_id]))


def summarize(events: list, draft_tokens: int) -> dict:
    """The evaluation's figures, all from `mtp_viz.analysis.metrics` (pooled over every generation in `events`)."""
    s = metrics.summarize(events)
    per_pos = (list(s.per_position_conditional) + [None] * draft_tokens)[:draft_tokens]
    return {
        "tau": round(s.tau, 4) if s.tau is not None else None,
        "alpha": round(s.alpha, 4),
        "first_position_acceptance": None if per_pos[0] is None else round(per_pos[0], 4),
        "per_position_acceptance": [None if p is None else round(p, 4) for p in per_pos],  # conditional
        "draft_acceptance_rate": round(s.acceptance_rate, 4),
        "verification_steps": sum(1 for r in metrics.step_records(events) if r.draft_tokens > 0),
        "new_tokens": s.new_tokens,
        "target_forwards": s.target_forwards,
    }


@torch.inference_mode()
def run_set(tok, target, drafter, prompts, max_new_tokens: int, draft_tokens: int) -> dict:
    pooled, samples = [], []
    for text in prompts:
        ids = tok(text)["input_ids"]
        ref = target.generate(torch.tensor([ids]), do_sample=False, max_new_tokens=max_new_tokens,
                              eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id)[0, len(ids):].tolist()
        events = engine_events(target, drafter, ids, max_new_tokens, tok.eos_token_id, draft_tokens)
        done = events[-1]
        assert isinstance(done, Done), f"the engine ended with {done!r}"
        assert list(done.generated_ids) == ref, "engine output differs from target.generate"
        pooled += events
        per = summarize(events, draft_tokens)
        samples.append({"prompt": text, "completion": tok.decode(list(done.generated_ids)),
                        "tau": per["tau"],
                        "first_position_acceptance": per["first_position_acceptance"]})
    res = summarize(pooled, draft_tokens)
    res["measured_with"] = "mtp_viz.engine.loop + mtp_viz.analysis.metrics"
    res["prompts"] = len(prompts)
    res["samples"] = samples
    return res


def evaluate_pair(out: Path, log_dir: Path | None = None, quick: bool = False, max_new_tokens: int = 64,
                  draft_tokens: int = DEFAULT_DRAFT_TOKENS):
    tok, target, drafter = load_pair(out)
    code = [p["prompt"] for p in json.loads((out / "eval_prompts.json").read_text())["prompts"]]
    prose = PROSE_PROMPTS
    if quick:
        code, prose, max_new_tokens = code[:1], prose[:1], 12
    results = {
        "settings": {"greedy": True, "draft_tokens": draft_tokens, "max_new_tokens": max_new_tokens},
        "held_out_code": run_set(tok, target, drafter, code, max_new_tokens, draft_tokens),
        "prose": run_set(tok, target, drafter, prose, max_new_tokens, draft_tokens),
    }
    for name in ("held_out_code", "prose"):
        r = results[name]
        print(f"{name}: τ {r['tau']}, alpha {r['alpha']}, first-position "
              f"acceptance {r['first_position_acceptance']}, per position {r['per_position_acceptance']}", flush=True)
    (log_dir or out).mkdir(parents=True, exist_ok=True)
    ((log_dir or out) / "eval_results.json").write_text(json.dumps(results, indent=2) + "\n")
    return results


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, default=Path("mtp_viz/assets/tiny"))
    ap.add_argument("--max-new-tokens", type=int, default=64)
    ap.add_argument("--draft-tokens", type=int, default=DEFAULT_DRAFT_TOKENS)
    ap.add_argument("--threads", type=int, default=1)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    evaluate_pair(a.out, a.out / "logs", max_new_tokens=a.max_new_tokens, draft_tokens=a.draft_tokens)
