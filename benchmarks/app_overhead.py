"""How much the app adds to generation: the same greedy run through the app's Run
handler (``mtp_viz.ui.Handlers.run``: HTML per step, throttled charts, stats) versus
consuming ``ModelPair.generate`` directly, speculative then autoregressive in both.

    python benchmarks/app_overhead.py                       # bundled tiny pair, or a random one
    python benchmarks/app_overhead.py --target google/gemma-4-E2B-it --drafter google/gemma-4-E2B-it-assistant

Runs alternate (engine, app, engine, app, ...) after one warm-up each; medians are
reported. "generation" stops the app's clock at the last streamed token, "total"
includes the final charts, comparison and theory panel.
"""
from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

from mtp_viz.presets import assets_dir

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

PROMPT = "def fibonacci(n):\n    \"\"\"Return the n-th Fibonacci number.\"\"\"\n"


def random_pair(folder: Path) -> tuple[str, str]:
    """A small random Gemma 4 pair saved to disk (tests/factories.py), for machines
    without the bundled or hub weights."""
    sys.path.insert(0, str(ROOT / "tests"))
    import factories
    target, drafter, tok = factories.gemma_target(), factories.gemma_assistant(), factories.word_tokenizer()
    for model, sub in ((target, "target"), (drafter, "drafter")):
        model.save_pretrained(folder / sub)
        tok.save_pretrained(folder / sub)
    return str(folder / "target"), str(folder / "drafter")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--target", default=None)
    ap.add_argument("--drafter", default=None)
    ap.add_argument("--prompt", default=None)
    ap.add_argument("--drafter-kind", default="mtp", choices=["mtp", "lookup"])
    ap.add_argument("--max-new-tokens", type=int, default=64)
    ap.add_argument("--draft-tokens", type=int, default=4)
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--threads", type=int, default=1,
                    help="torch CPU threads (1 keeps a tiny model steady on a shared machine)")
    args = ap.parse_args()

    import torch
    torch.set_num_threads(args.threads)

    from mtp_viz import models, service, ui

    target, drafter, prompt = args.target, args.drafter, args.prompt or PROMPT
    if target is None:
        tiny = assets_dir() / "tiny"
        if all((tiny / sub / "config.json").exists() for sub in ("target", "drafter")):
            target = "tiny"
        else:
            target, drafter = random_pair(Path(tempfile.mkdtemp()))
            prompt = args.prompt or "w10 w11 w12 w13 w10 w11 w12 w13"
    pair = models.get_pair(target, drafter)
    settings = dict(drafter=args.drafter_kind, max_new_tokens=args.max_new_tokens,
                    draft_tokens=args.draft_tokens, schedule="constant", temperature=0.0, chat=True)
    timed = TimedPair(pair)
    handlers = ui.Handlers(service.PairLoader(lambda t, d: timed), cap=10**6)
    final_slot = ui.SLOTS.index("tokens-per-forward-plot")

    def engine() -> tuple[float, float, int]:
        t0, n = time.perf_counter(), 0
        for mode in ("speculative", "autoregressive"):
            for _ in pair.generate(prompt, mode=mode, **settings):
                n += 1
        dt = time.perf_counter() - t0
        return dt, dt, n

    own: list[float] = []  # the app's own work per run: handler time outside the engine

    def app() -> tuple[float, float, int]:
        stamps, frames = [], []
        timed.inside = 0.0
        t0 = time.perf_counter()
        for out in handlers.run(prompt, ui.CUSTOM, target, drafter or "", args.max_new_tokens,
                                args.draft_tokens, "constant", args.drafter_kind, "greedy",
                                0.8, 0.95, 0, True, True):
            stamps.append(time.perf_counter() - t0)
            frames.append(out)
        last = max(i for i, f in enumerate(frames) if not _is_skip(f[final_slot]))
        own.append(stamps[last - 1] - timed.inside_at_last)
        return stamps[last - 1], stamps[-1], len(frames)

    engine(), app()  # warm-up
    runs: dict[str, list[tuple[float, float, int]]] = {"engine": [], "app": []}
    for _ in range(args.repeats):
        runs["engine"].append(engine())
        runs["app"].append(app())
    e_gen = statistics.median(r[0] for r in runs["engine"])
    a_gen = statistics.median(r[0] for r in runs["app"])
    a_tot = statistics.median(r[1] for r in runs["app"])
    ratios = [a[0] / e[0] for e, a in zip(runs["engine"], runs["app"])]
    print(f"pair: {target} + {drafter or '(bundled drafter)'}; {args.max_new_tokens} new tokens, "
          f"{args.drafter_kind} drafter, {args.repeats} alternating repeats")
    print(f"engine alone (speculative + autoregressive): median {e_gen * 1000:.1f} ms")
    print(f"app handler, generation:                     median {a_gen * 1000:.1f} ms "
          f"({runs['app'][0][2]} frames)")
    print(f"app handler, total with final charts:        median {a_tot * 1000:.1f} ms")
    print(f"overhead (generation): {100 * (a_gen / e_gen - 1):+.1f}% (ratio of medians), "
          f"{100 * (statistics.median(ratios) - 1):+.1f}% (median of paired ratios)")
    o = statistics.median(own[1:])  # own[0] is the warm-up
    print(f"app's own work while generating (handler time outside the engine): median "
          f"{o * 1000:.1f} ms = {100 * o / e_gen:.1f}% of the engine's time")
    return 0


class TimedPair:
    """Wraps a ModelPair and adds up the time spent inside its event generators."""

    def __init__(self, pair):
        self.pair, self.inside, self.inside_at_last = pair, 0.0, 0.0

    def generate(self, *args, **kwargs):
        t = time.perf_counter()
        gen = self.pair.generate(*args, **kwargs)
        self.inside += time.perf_counter() - t
        while True:
            t = time.perf_counter()
            try:
                e = next(gen)
            except StopIteration:
                self.inside += time.perf_counter() - t
                self.inside_at_last = self.inside
                return
            self.inside += time.perf_counter() - t
            yield e


def _is_skip(v) -> bool:
    return isinstance(v, dict) and v == {"__type__": "update"}  # what gr.skip() returns


if __name__ == "__main__":
    sys.exit(main())
