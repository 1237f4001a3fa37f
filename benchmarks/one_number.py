"""One setup, one number: the speedup every surface shows for the bundled pair's default
setup, measured in one invocation, on a quiet machine.

    python benchmarks/one_number.py                  # a held-out code prompt, 64 tokens, 4 drafts
    python benchmarks/one_number.py --runs 5 --repeats 5

The surfaces, each driven as its user drives it:

- **Run** and **Measure**: a fresh ``python app.py`` in headless Chromium at 1280×720;
  ``--runs`` clicks of ``#run`` (the figure each shows, ``#compare[data-speedup]``; the
  first includes nothing cold: the app warms a pair when it loads), then one click of
  ``#measure`` (the page's default 5 repeats);
- **launch(pair)**: a script that loads the pair with ``mtp_viz.load_pair`` and serves it
  with ``mtp_viz.launch(pair)``, driven the same way (Run, then Measure);
- **show()**: ``mtp_viz.show(pair, prompt)`` in a fresh process, ``--runs`` calls (its
  events' speedup, as the badge it draws shows it), then ``show_measurement``;
- **bench**: ``mtp-viz bench`` on the same prompt and settings (``--repeats`` repeats).

Prints each surface's figures, the medians, and each median ÷ the bench's (goal: within
0.85–1.15). Needs Debian's chromium and ``playwright``.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import textwrap
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from app_speedup import ARGS, ROOT, bench, free_port, ready_page  # noqa: E402
from mtp_viz.prompts import code_suite, load_prompts  # noqa: E402

LAUNCH = """
import sys, time
import mtp_viz
pair = mtp_viz.load_pair("tiny")
demo = mtp_viz.launch(pair, port=int(sys.argv[1]))
while True:
    time.sleep(1)
"""

SHOW = """
import io, json, re, sys
import mtp_viz
from mtp_viz.notebook import show_measurement
prompt, runs, tokens, draft, repeats = (sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]),
                                        int(sys.argv[5]))
pair = mtp_viz.load_pair("tiny")
shown = []
for _ in range(runs):
    out = io.StringIO()
    mtp_viz.show(pair, prompt, max_new_tokens=tokens, draft_tokens=draft, chat=False, out=out)
    line = out.getvalue().strip().splitlines()[-1]   # the figure show() prints: "speculative ran at ×X ..."
    shown.append(float(re.search(r"ran at ×([0-9.]+) the speed", line).group(1)))
m = show_measurement(pair, prompt, repeats=repeats, max_new_tokens=tokens, draft_tokens=draft, chat=False,
                     out=io.StringIO())
print(json.dumps({"runs": shown, "measure": m.median}))
"""


def browser(cmd: list[str], port: int, prompt: str, runs: int, tokens: int, draft: int, repeats: int,
            threads: int) -> tuple[list[float], float]:
    """``runs`` clicks of Run, then one of Measure, on the app ``cmd`` serves on ``port``."""
    from playwright.sync_api import sync_playwright
    env = {**os.environ, "GRADIO_SERVER_PORT": str(port), "GRADIO_ANALYTICS_ENABLED": "False",
           "MTP_VIZ_THREADS": str(threads), "NO_PROXY": "127.0.0.1,localhost", "no_proxy": "127.0.0.1,localhost"}
    proc = subprocess.Popen(cmd, env=env, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    shown = []
    try:
        with sync_playwright() as p:
            b = p.chromium.launch(executable_path="/usr/bin/chromium", args=ARGS)
            page = ready_page(b, port, prompt, tokens, draft, 300)  # the bundled pair opens with chat off
            for _ in range(runs):
                page.click("#run")
                page.wait_for_selector("#compare:not([data-speedup])", timeout=60_000)
                page.wait_for_selector("#compare[data-basis='single run']", timeout=300_000)
                shown.append(float(page.locator("#compare").get_attribute("data-speedup")))
            page.click("#measure")
            page.wait_for_selector("#compare[data-basis^='median of']", timeout=600_000)  # the page's 5
            measured = float(page.locator("#compare").get_attribute("data-speedup"))
            b.close()
    finally:
        proc.terminate()
        proc.wait(30)
    return shown, measured


def show(prompt: str, runs: int, tokens: int, draft: int, repeats: int, threads: int) -> tuple[list[float], float]:
    env = {**os.environ, "MTP_VIZ_THREADS": str(threads)}
    out = subprocess.run([sys.executable, "-c", SHOW, prompt, str(runs), str(tokens), str(draft), str(repeats)],
                         env=env, cwd=ROOT, check=True, capture_output=True, text=True)
    r = json.loads(out.stdout.strip().splitlines()[-1])
    return r["runs"], r["measure"]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--prompt-index", type=int, default=0, help="which held-out code prompt")
    ap.add_argument("--max-new-tokens", type=int, default=64)
    ap.add_argument("--draft-tokens", type=int, default=4)
    ap.add_argument("--threads", type=int, default=max(1, (os.cpu_count() or 2) - 1),
                    help="torch threads for every surface (the app's default)")
    args = ap.parse_args()
    prompt = load_prompts(code_suite())[args.prompt_index].text
    common = (prompt, args.runs, args.max_new_tokens, args.draft_tokens, args.repeats, args.threads)
    rows = {}
    port = free_port()
    rows["app"] = browser([sys.executable, str(ROOT / "app.py")], port, *common)
    port = free_port()
    rows["launch(pair)"] = browser([sys.executable, "-c", textwrap.dedent(LAUNCH), str(port)], port, *common)
    rows["show()"] = show(*common)
    ref = bench(prompt, args.max_new_tokens, args.draft_tokens, args.threads, args.repeats)
    print(f"Bundled pair, held-out code prompt {args.prompt_index}, greedy, {args.draft_tokens} drafts, "
          f"{args.max_new_tokens} new tokens, no chat template, {args.threads} torch thread(s); "
          f"{time.strftime('%Y-%m-%d %H:%M')}\n")
    print("| surface | single runs (Run / show) | median | ÷ bench | Measure (median of repeats) | ÷ bench |")
    print("|---|---|---|---|---|---|")
    for name, (shown, measured) in rows.items():
        med = statistics.median(shown)
        print(f"| {name} | {' '.join(f'×{x:.2f}' for x in shown)} | ×{med:.3f} | {med / ref:.3f} | "
              f"×{measured:.3f} | {measured / ref:.3f} |")
    print(f"| mtp-viz bench ({args.repeats} repeats) | – | ×{ref:.3f} | 1.000 | – | – |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
