"""Write the model card (mtp_viz/assets/tiny/README.md) and the loss-curve plot from the training logs and a bench.

    python -m training.card --out mtp_viz/assets/tiny --bench benchmarks/results/tiny-code/bench.json
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path


def _tau(r: dict) -> float:
    """τ after the prefill, as a result says it (``tau``); a result written before τ had one
    name says it as a bench row's ``decode_tokens_per_forward``, or gives the counts to
    recompute it (one prefill per prompt; its ``mean_accepted_length`` counted the prefill)."""
    from mtp_viz.engine.events import tau_of
    for key in ("tau", "decode_tokens_per_forward"):
        if r.get(key) is not None:
            return r[key]
    return tau_of(r["new_tokens"], r["target_forwards"], r["prompts"])


def _read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()] if path.exists() else []


def _target_points(log: list[dict]) -> list[dict]:
    """Train records of all phases with cumulative training tokens (phases may use different batch sizes)."""
    pts, offset, cfg, first = [], 0, None, False
    for r in log:
        if r["event"] == "start":
            cfg, first = r, True
        elif r["event"] == "train":
            tok = offset + r["step"] * cfg["batch_size"] * cfg["seq_len"]
            pts.append({**r, "mtok": tok / 1e6, "phase_start": first and r.get("phase", 1) > 1})
            first = False
        elif r["event"] == "done":
            offset += r["tokens_seen"]
    return pts


def plot_losses(out: Path) -> Path | None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    logs = out / "logs"
    t = _target_points(_read_jsonl(logs / "target_log.jsonl"))
    d = [r for r in _read_jsonl(logs / "drafter_log.jsonl") if r.get("event") == "train"]
    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    if t:
        ax = axes[0]
        ax.plot([r["mtok"] for r in t], [r["loss_ema"] for r in t], "o-", label="train (EMA)")
        ax.plot([r["mtok"] for r in t], [r["val_loss"] for r in t], "o-", label="held-out")
        for r in t:
            if r.get("phase_start"):
                ax.axvline(r["mtok"], color="gray", ls=":", lw=1)
        ax.set(title="Target: next-token cross-entropy", xlabel="training tokens (millions)", ylabel="nats / token")
        ax.legend()
        ax.grid(alpha=0.3)
    if d:
        ax = axes[1]
        dv = [r for r in d if "val_agree1" in r]
        for j in range(1, 9):
            if dv and f"val_agree{j}" in dv[0]:
                ax.plot([r["step"] for r in dv], [r[f"val_agree{j}"] for r in dv],
                        label=f"draft {j}: top-1 agrees with target")
        ax.set(title="Drafter (held-out, teacher-forced)", xlabel="step", ylabel="fraction", ylim=(0, 1))
        ax2 = ax.twinx()
        ax2.plot([r["step"] for r in d], [r["loss_ema"] for r in d], "k--", alpha=0.5,
                 label="distillation loss (EMA)")
        ax2.set_ylabel("loss")
        ax.legend(loc="lower right", fontsize=8)
        ax.grid(alpha=0.3)
    fig.tight_layout()
    path = out / "loss_curves.png"
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return path


def _size(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def _mb(n: int) -> str:
    return f"{n / 1e6:.1f} MB"


def inserted_gains(out: Path, upscale: dict) -> tuple[float, float] | None:
    """Mean |gain| of the post-attention / post-feed-forward norms: (inserted layers, original layers)."""
    try:
        from safetensors.torch import load_file
    except ImportError:
        return None
    from .models import PERIOD, original_block_positions

    place = original_block_positions(upscale["from_layers"], upscale["to_layers"])
    sd = load_file(out / "target" / "model.safetensors")
    ins, orig = [], []
    for k, v in sd.items():
        if k.endswith(("post_attention_layernorm.weight", "post_feedforward_layernorm.weight")):
            block = int(k.split(".")[2]) // PERIOD
            (orig if block in place else ins).append(v.float().abs().mean().item())
    return sum(ins) / len(ins), sum(orig) / len(orig)


def bench_lines(bench: dict) -> list[str]:
    """The wall-clock table of an `mtp-viz bench` run (bench.json), one row per setting."""
    m, ar = bench["meta"], bench["autoregressive"]
    best = max(bench["settings"], key=lambda r: r["speedup"])

    def pct(x):
        return "–" if x is None else f"{100 * x:.0f}%"

    rows = [
        f"`mtp-viz bench --threads {m['torch_threads']}` on the {m['prompts']} held-out prompts of `eval_prompts.json` "
        f"(no chat template), greedy, {m['max_new_tokens']} new tokens each, median of {m['repeats']} repeats; "
        f"torch {m['torch']}, transformers {m['transformers']}, a {m['cpus']}-core {m['machine']} machine, "
        f"{m['torch_threads']} torch thread. Plain decoding (autoregressive): {ar['tokens_per_second']:.1f} tokens/s, "
        f"{1e3 * ar['step_seconds']:.1f} ms per target step. Every speculative output was identical to plain greedy "
        f"decoding ({m['parity_failures']} parity failures).",
        "",
        "| setting | tokens/s | speedup | α | first-position acceptance | τ | c | v |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in bench["settings"]:
        first = (r.get("per_position_conditional") or [None])[0]
        name = f"**{r['setting']}**" if r is best else r["setting"]
        rows.append(f"| {name} | {r['tokens_per_second']:.1f} | ×{r['speedup']:.2f} | {r['alpha']:.2f} | "
                    f"{pct(first)} | "
                    f"{_tau(r):.2f} | {r['cost_coefficient']:.3f} | {r['verify_cost']:.2f} |")
    rows += [
        "",
        ("speedup: tokens/s over plain decoding, end to end; α: per-token acceptance (maximum likelihood); "
         "τ: new tokens"),
        "per target forward after the prefill; c: one drafter step ÷ one target step; v: one verification forward",
        "(the newest token plus the drafts) ÷ one target step.",
    ]
    return rows


def write_card(out: Path, bench_path: Path | None = None) -> Path:
    logs = out / "logs"
    tl, dl = _read_jsonl(logs / "target_log.jsonl"), _read_jsonl(logs / "drafter_log.jsonl")
    t_starts = [r for r in tl if r["event"] == "start"]
    t_dones = [r for r in tl if r["event"] == "done"]
    t_start, t_done = t_starts[-1], t_dones[-1]
    t_up = [r for r in tl if r["event"] == "upscale"]
    bench = json.loads(bench_path.read_text()) if bench_path and bench_path.exists() else None
    d_start = next(r for r in dl if r["event"] == "start")
    d_done = next(r for r in dl if r["event"] == "done")
    d_check = [r for r in dl if r["event"] == "parallel_vs_sequential_check"][-1]
    ev = json.loads((logs / "eval_results.json").read_text())
    run = json.loads((logs / "run.json").read_text()) if (logs / "run.json").exists() else {}
    prompts = json.loads((out / "eval_prompts.json").read_text())["prompts"]
    tcfg = json.loads((out / "target" / "config.json").read_text())
    dcfg = json.loads((out / "drafter" / "config.json").read_text())
    dtc = dcfg["text_config"]
    dgen = json.loads((out / "drafter" / "generation_config.json").read_text())
    plot = plot_losses(out)
    code, prose = ev["held_out_code"], ev["prose"]
    a = run.get("args", {})

    def pct(x):
        return "n/a" if x is None else f"{100 * x:.0f}%"

    def row(name, r):
        return (f"| {name} | {r['prompts']} | {_tau(r):.2f} | {pct(r['first_position_acceptance'])} | "
                + " / ".join(pct(x) for x in r["per_position_acceptance"]) + f" | {pct(r['draft_acceptance_rate'])} |")

    sample = code["samples"][0]
    lines = [
        "# Bundled tiny Gemma 4 pair: target + MTP drafter",
        "",
        "A small, fully offline pair so mtp-viz runs with no download and no GPU: a `Gemma4ForCausalLM` target and",
        "its `Gemma4AssistantForCausalLM` multi-token-prediction drafter, both trained from scratch on the Python",
        "standard library's own source code. They are far too small to be useful language models, but speculative",
        "decoding with them behaves like the real thing: drafts are mostly accepted on predictable code, and, as with",
        "the real checkpoints, drafting costs a small fraction of a target step, so MTP pays off in wall-clock time on",
        "a CPU. Given English prose, which it never saw, the target soon falls into repetitive code-like text whose",
        f"first draft the drafter gets right about as often as on code "
        f"({pct(prose['first_position_acceptance'])} against "
        f"{pct(code['first_position_acceptance'])}; {_tau(prose):.1f} and "
        f"{_tau(code):.1f} tokens",
        "per target forward), so prose is no example of low acceptance for this pair (table below).",
        "",
        "```python",
        "from transformers import AutoModelForCausalLM, AutoTokenizer",
        'tok = AutoTokenizer.from_pretrained("mtp_viz/assets/tiny/target")',
        'target = AutoModelForCausalLM.from_pretrained("mtp_viz/assets/tiny/target")    # Gemma4ForCausalLM',
        'drafter = AutoModelForCausalLM.from_pretrained("mtp_viz/assets/tiny/drafter")  # Gemma4AssistantForCausalLM',
        "```",
        "",
        "Weights are stored in bfloat16 (half the bytes in git); the configs say float32, so they load as float32",
        "(what mtp-viz uses on a CPU). Training, evaluation and the numbers below all use the stored values.",
        "",
        "## Why these sizes",
        "",
        "Speculative decoding pays off when a drafter step costs a small fraction c of a target step. The real",
        "Gemma 4 E2B assistant has about 78M parameters against a target of about 5B, so its c is well under 0.1.",
        "On a CPU at these widths, a forward's cost is dominated by per-layer overhead, not by parameters, so the",
        "cost ratio is set by depth: the previous bundled pair (a 2-layer drafter against a 6-layer target) had",
        "c ≈ 0.4 and gained only ×1.24–1.28 in wall-clock time although 87% of first drafts were accepted. Here a",
        f"{dtc['num_hidden_layers']}-layer drafter reads a {tcfg['num_hidden_layers']}-layer target, "
        "which puts the measured c "
        "in the real assistant's regime (table below), so the demo shows what MTP does for the real models.",
        *([] if dtc["hidden_size"] == tcfg["hidden_size"] else [
            "",
            f"The drafter is also shaped like the real assistants: narrower than its target "
            f"({dtc['hidden_size']} against "
            f"{tcfg['hidden_size']};",
            ("the 12B's assistant is 1024 wide for a 3840-wide target) and with both kinds of attention layer: "
             "its sliding"),
            ("layer reads the target's last sliding layer's K/V, its full layer the last full layer's. "
             "llama.cpp's loader"),
            ("requires both (it refuses an assistant as wide as its target, or one with no sliding layer), "
             "so the pair runs"),
            f"on stock llama.cpp. {dtc['num_hidden_layers']} layers (the real assistants have 4) "
            "are the fewest that have "
            "both kinds, and depth,",
            "not width, is what a drafter step costs here: each layer adds to c.",
        ]),
        "",
        "## Models",
        "",
        "| | target (`target/`) | drafter (`drafter/`) |",
        "|---|---|---|",
        "| class | `Gemma4ForCausalLM` | `Gemma4AssistantForCausalLM` |",
        f"| parameters | {t_start['params']:,} | {d_start['params']:,} |",
        (f"| size on disk (bfloat16 weights, with tokenizer) | {_mb(_size(out / 'target'))} "
         f"| {_mb(_size(out / 'drafter'))} |"),
        f"| layers | {tcfg['num_hidden_layers']} ({', '.join(t[:1] for t in tcfg['layer_types'])}: "
        "s = sliding, f = full) "
        f"| {dtc['num_hidden_layers']} ({', '.join(t[:1] for t in dtc['layer_types'])}), "
        "reading the target's shared K/V |",
        f"| hidden / intermediate | {tcfg['hidden_size']} / {tcfg['intermediate_size']} "
        f"| {dtc['hidden_size']} / {dtc['intermediate_size']} "
        f"(backbone_hidden_size {dcfg['backbone_hidden_size']}) |",
        f"| heads (query / KV) x head_dim | {tcfg['num_attention_heads']} / {tcfg['num_key_value_heads']} "
        f"x {tcfg['head_dim']} "
        f"| {dtc['num_attention_heads']} / {dtc['num_key_value_heads']} x {dtc['head_dim']} |",
        f"| sliding window | {tcfg['sliding_window']} | {dtc['sliding_window']} |",
        (f"| vocabulary | {tcfg['vocab_size']} (byte-level BPE) "
         "| same, lm_head tied to its (target-initialised) embedding |"),
        "",
        ("Tokenizer: byte-level BPE trained with `tokenizers` on the training files, "
         "special tokens `<pad>`=0, `<eos>`=1,"),
        "`<bos>`=2, `<unk>`=3; `<bos>` is prepended on encoding. Any text round-trips exactly (indentation included).",
        f"The drafter's `generation_config.num_assistant_tokens` is {dgen.get('num_assistant_tokens')}.",
        "",
        "## Data",
        "",
        ("The `*.py` files of the standard library of the Python that runs the training "
         "(`sysconfig.get_paths()[\"stdlib\"]`,"),
        (f"here Python {run.get('python', '?')}), test suites and site-packages excluded. "
         "About 5% of the files are held out,"),
        "chosen by a hash of their path (`training/data.py`); the held-out files give the validation loss and the",
        (f"{len(prompts)} evaluation prompts in `eval_prompts.json` "
         "(beginnings of functions and classes, 30-80 tokens)."),
        f"Training tokens: {t_start['train_tokens']:,}.",
        "",
        "## Training",
        "",
        (f"Hardware: a 2-core {run.get('processor', 'CPU')} machine, no GPU, shared with other jobs "
         "(so step rates varied a lot);"),
        f"torch {run.get('torch', '?')}, float32. Target phases 1 and 2 ran on 2 threads; phase 3 and the drafter on 1",
        "(`training/build_bundled.sh`).",
        "",
        "* Target: AdamW (betas 0.9/0.95, weight decay 0.1), linear warmup then cosine decay, "
        f"{len(t_dones)} phase(s) (a later phase continues from the previous checkpoint with a fresh schedule):",
        *[f"  phase {i + 1}: {st.get('layers', 6)} layers, peak LR {st.get('peak_lr', a.get('target_lr'))}, batches of "
          f"{st['batch_size']} x {st['seq_len']} tokens, {dn['step']} steps ({dn['tokens_seen']:,} tokens) in "
          f"{dn['elapsed_s'] / 60:.1f} min, held-out loss after it {dn['val_loss']:.3f};"
          for i, (st, dn) in enumerate(zip(t_starts, t_dones))],
        *[f"  before phase {u['phase']}, depth up-scaling grew the {u['from_layers']}-layer target "
          f"to {u['to_layers']} layers:"
          " the original blocks (sliding, sliding, full) keep their order, the first and last stay in place, and each"
          " inserted block copies the nearest original block before it with the gains of its post-attention and"
          " post-feed-forward norms set to zero, an exact identity (Gemma 4 normalises each branch's output before"
          " the residual add, so a zero output projection would not stay one); held-out loss"
          f" {u['val_loss_before']:.4f}"
          f" before and {u['val_loss_after']:.4f} after, then trained with those gains at {u['gain_lr_mult']:g}x the"
          " learning rate;" for u in t_up],
        *[f"  after phase {u['phase']} the inserted layers' output gains average {g[0]:.3f} in absolute value (the"
          f" original layers' {g[1]:.2f}): in so short a phase the inserted layers only begin to contribute, while"
          f" every forward costs all {u['to_layers']} layers;"
          for u in t_up for g in [inserted_gains(out, u)] if g],
        f"  in all {sum(d['step'] for d in t_dones)} steps, {sum(d['tokens_seen'] for d in t_dones):,} tokens "
        f"(about {sum(d['tokens_seen'] for d in t_dones) / t_start['train_tokens']:.1f} epochs), "
        f"{sum(d['elapsed_s'] for d in t_dones) / 60:.1f} min.",
        f"  Final loss: train {t_done['loss_ema']:.3f} (EMA), held-out {t_done['val_loss']:.3f} nats/token.",
        "* Drafter: trained against the frozen target exactly as it is fed at inference: for an anchor m, step 1 sees",
        "  `concat(target_embed(x_m), h_{m-1})` (target's last-layer activation), later steps the embedding of the",
        "  previous token and the drafter's own projected state, all at the constant position m, attending to the",
        "  target's shared K/V of positions < m. All anchors of a sequence are computed in parallel with explicit",
        f"  attention masks; a built-in check asserts this equals the one-query inference call (max |diff| "
        f"{d_check['max_abs_diff']:.1e}).",
        f"  {d_start['unroll']} unrolled, teacher-forced steps; loss: cross-entropy to the target's own next-token",
        "  distribution at each drafted position (later steps weighted 0.8^j). Initialised from the target's",
        "  embedding, final norm and last layer of each attention type the drafter has"
        + ("." if dtc["hidden_size"] == tcfg["hidden_size"] else
           f", projected onto\n  the target embedding's top {dtc['hidden_size']} singular directions (the drafter is "
           f"{dtc['hidden_size']} wide, the target {tcfg['hidden_size']}; its lm_head is\n  tied to that projected "
           "embedding)."),
        f"  Batches of {d_start['batch_size']} x {a.get('seq_len')} tokens, "
        + ("every anchor position of each sequence" if d_start['anchors'] >= a.get('seq_len', 0) - d_start['unroll'] - 1
           else f"{d_start['anchors']} random anchors per sequence") + "; "
        f"peak LR {a.get('drafter_lr')}; {d_done['step']} steps in "
        f"{d_done['elapsed_s'] / 60:.1f} min; final distillation loss {d_done['loss_ema']:.3f} (EMA).",
        "  Held-out teacher-forced top-1 agreement with the target per draft position: "
        + ", ".join(f"{100 * d_done[f'val_agree{j}']:.0f}%" for j in range(1, d_start['unroll'] + 1)
                    if f"val_agree{j}" in d_done) + ".",
        "",
        "![loss curves](loss_curves.png)" if plot else "",
        "",
        "Reproduce (same Python version gives the same files and split; seeds are fixed):",
        "",
        "```bash",
        "training/build_bundled.sh mtp_viz/assets/tiny   # the exact sequence of runs above, then this card",
        "python -m training.train_tiny --quick --out /tmp/tiny-quick # smoke test, under a minute",
        "```",
        "",
        "Both trainers stop at a step count or a wall-clock budget, whichever comes first (the cosine schedule",
        "follows the same progress), so a faster machine trains for more steps.",
        "",
        *(["## Measured speedup (wall clock, CPU)", "", *bench_lines(bench), ""] if bench else []),
        "## Measured acceptance",
        "",
        f"Greedy decoding, constant draft length {ev['settings']['draft_tokens']}, "
        f"{ev['settings']['max_new_tokens']} new "
        f"tokens per prompt, measured with {code['measured_with']}; every output was checked identical to",
        "`target.generate(do_sample=False)`. τ = new tokens per target forward after the prefill (the target's own",
        ("token included; each prompt's prefill and its first token left out). "
         "Per-position acceptance = P(draft i accepted | drafts"),
        "1..i-1 accepted).",
        "",
        (f"| prompts | n | τ | first-position acceptance "
         f"| per position ({'/'.join(str(i + 1) for i in range(ev['settings']['draft_tokens']))}) "
         "| drafts accepted overall |"),
        "|---|---|---|---|---|---|",
        row("held-out stdlib code", code),
        row("English prose (never seen in training)", prose),
        "",
        "Sample (held-out prompt from `" + prompts[0]["file"] + "`, greedy continuation after the marker):",
        "",
        "```python",
        sample["prompt"] + "#### generated:\n" + sample["completion"],
        "```",
        "",
        "Regenerate the numbers with `python -m training.evaluate --out mtp_viz/assets/tiny` and the wall-clock table",
        "with the `mtp-viz bench` command at the end of `training/build_bundled.sh`.",
        "",
    ]
    path = out / "README.md"
    path.write_text("\n".join(lines))
    return path


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--out", type=Path, default=Path("mtp_viz/assets/tiny"))
    ap.add_argument("--bench", type=Path, default=Path("benchmarks/results/tiny-code/bench.json"),
                    help="an `mtp-viz bench` result on the held-out prompts, for the wall-clock table")
    args = ap.parse_args()
    print(write_card(args.out, args.bench))
