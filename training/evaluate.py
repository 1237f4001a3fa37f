"""Measure the bundled pair: greedy speculative decoding, constant draft length 4, on held-out code and on prose.

    python -m training.evaluate --out mtp_viz/assets/tiny

Every run is checked against `target.generate(do_sample=False)` (speculative decoding must not change the
output). The project's own engine (`mtp_viz.engine`) is used for the numbers when it can be imported, and
the minimal loop of `training/speculative.py` otherwise; when both are available their outputs are compared.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from .speculative import greedy_speculative

# Surprising text for a model trained only on Python source: plain English prose.
PROSE_PROMPTS = [
    "The old lighthouse keeper climbed the spiral stairs every evening, counting the steps as his father had "
    "taught him, and when he reached the lamp room he paused to watch the fishing boats",
    "Autumn came early to the valley that year. The orchards were heavy with apples, and the children who "
    "walked to school along the river road would stop to",
    "She opened the letter slowly, unsure whether she wanted to know what her brother had written after so "
    "many years of silence, and read the first line twice before",
]

DRAFT_TOKENS = 4


def load_pair(out: Path):
    tok = AutoTokenizer.from_pretrained(out / "target")
    target = AutoModelForCausalLM.from_pretrained(out / "target").eval()
    drafter = AutoModelForCausalLM.from_pretrained(out / "drafter").eval()
    return tok, target, drafter


def engine_run(target, drafter, prompt_ids, max_new_tokens, eos_id):
    """Run the project's engine; returns (generated ids, per-step accepted, per-step drafted, forwards) or None."""
    try:
        from mtp_viz.drafters import MTPDrafter
        from mtp_viz.engine import speculative
        from mtp_viz.events import Done, Step
        from mtp_viz.sampling import Sampling
    except Exception:  # the engine is optional here
        return None
    accepted, drafted, done = [], [], None
    for ev in speculative(target, MTPDrafter(drafter, target), prompt_ids, max_new_tokens=max_new_tokens,
                          sampling=Sampling(temperature=0.0), schedule="constant", draft_tokens=DRAFT_TOKENS,
                          eos_token_ids=[eos_id]):
        if isinstance(ev, Step) and ev.draft_len > 0:
            accepted.append(ev.accepted)
            drafted.append(ev.draft_len)
        elif isinstance(ev, Done):
            done = ev
    return list(done.generated_ids), accepted, drafted, done.target_forwards


def summarize(accepted, drafted, new_tokens, forwards):
    steps = len(accepted)
    per_pos = []
    for i in range(1, DRAFT_TOKENS + 1):
        reached = sum(1 for a, d in zip(accepted, drafted) if d >= i and a >= i - 1)
        ok = sum(1 for a, d in zip(accepted, drafted) if d >= i and a >= i)
        per_pos.append(round(ok / reached, 4) if reached else None)
    return {
        "mean_accepted_length": round(new_tokens / max(forwards, 1), 4),
        "first_position_acceptance": per_pos[0],
        "per_position_acceptance": per_pos,  # P(draft i accepted | drafts 1..i-1 accepted)
        "draft_acceptance_rate": round(sum(accepted) / max(sum(drafted), 1), 4),
        "verification_steps": steps,
        "new_tokens": new_tokens,
        "target_forwards": forwards,
    }


@torch.inference_mode()
def run_set(tok, target, drafter, prompts, max_new_tokens, use_engine=True):
    acc_all, dr_all, new_all, fw_all, samples, engine_used = [], [], 0, 0, [], None
    for text in prompts:
        ids = tok(text)["input_ids"]
        ref = target.generate(torch.tensor([ids]), do_sample=False, max_new_tokens=max_new_tokens,
                              eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id)[0, len(ids):].tolist()
        own = greedy_speculative(target, drafter, ids, max_new_tokens, k=DRAFT_TOKENS, eos_token_id=tok.eos_token_id)
        assert own.ids == ref, "speculative output differs from target.generate"
        eng = engine_run(target, drafter, ids, max_new_tokens, tok.eos_token_id) if use_engine else None
        if eng is not None:
            assert eng[0] == ref, "engine output differs from target.generate"
            gen, acc, dr, fw = eng
            engine_used = True
        else:
            gen, acc, dr, fw = own.ids, own.accepted, own.drafted, own.forwards
            engine_used = False
        acc_all += acc
        dr_all += dr
        new_all += len(gen)
        fw_all += fw
        per = summarize(acc, dr, len(gen), fw)
        samples.append({"prompt": text, "completion": tok.decode(gen), "mean_accepted_length": per["mean_accepted_length"],
                        "first_position_acceptance": per["first_position_acceptance"],
                        "own_loop_mean_accepted_length": round(own.mean_accepted_length, 4)})
    res = summarize(acc_all, dr_all, new_all, fw_all)
    res["measured_with"] = "mtp_viz.engine" if engine_used else "training/speculative.py"
    res["prompts"] = len(prompts)
    res["samples"] = samples
    return res


def evaluate_pair(out: Path, log_dir: Path | None = None, quick: bool = False, max_new_tokens: int = 64):
    tok, target, drafter = load_pair(out)
    code = [p["prompt"] for p in json.loads((out / "eval_prompts.json").read_text())["prompts"]]
    prose = PROSE_PROMPTS
    if quick:
        code, prose, max_new_tokens = code[:1], prose[:1], 12
    results = {
        "settings": {"greedy": True, "draft_tokens": DRAFT_TOKENS, "max_new_tokens": max_new_tokens},
        "held_out_code": run_set(tok, target, drafter, code, max_new_tokens),
        "prose": run_set(tok, target, drafter, prose, max_new_tokens),
    }
    for name in ("held_out_code", "prose"):
        r = results[name]
        print(f"{name}: mean accepted length {r['mean_accepted_length']}, first-position acceptance "
              f"{r['first_position_acceptance']}, per position {r['per_position_acceptance']} ({r['measured_with']})",
              flush=True)
    (log_dir or out).mkdir(parents=True, exist_ok=True)
    ((log_dir or out) / "eval_results.json").write_text(json.dumps(results, indent=2) + "\n")
    return results


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, default=Path("mtp_viz/assets/tiny"))
    ap.add_argument("--max-new-tokens", type=int, default=64)
    ap.add_argument("--threads", type=int, default=2)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    evaluate_pair(a.out, a.out / "logs", max_new_tokens=a.max_new_tokens)
