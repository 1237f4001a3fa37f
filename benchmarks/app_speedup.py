"""Is the speedup the app shows a measurement? Five identical runs in a real browser
against a fresh ``python app.py`` (the first, cold run included), then ``mtp-viz bench``
on the same prompt and settings, in the same invocation.

    python benchmarks/app_speedup.py                 # bundled pair, a held-out code prompt
    python benchmarks/app_speedup.py --runs 5 --prompt-index 0

Reports each run's ``#compare[data-speedup]``, their max/min spread (goal ≤ 1.15), their
median, and the bench's median speedup (goal: the app's median within ±15% of it).
``--pause S`` clicks each next run S seconds after the figure appears, as a person reads
it; by default at once, while the browser may still be drawing the last run's charts.
Needs Debian's chromium and the ``playwright`` package. Run it on a quiet machine.
"""
from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from mtp_viz.prompts import code_suite, load_prompts

ROOT = Path(__file__).resolve().parent.parent
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def cpu_seconds(match) -> float:
    """CPU seconds (user + system) used so far by the processes whose /proc/PID/comm
    ``match`` accepts: where the machine's time goes while the app runs."""
    total, tick = 0.0, os.sysconf("SC_CLK_TCK")
    for d in Path("/proc").iterdir():
        try:
            if d.name.isdigit() and match(int(d.name), (d / "comm").read_text().strip()):
                fields = (d / "stat").read_text().rsplit(")", 1)[1].split()
                total += (int(fields[11]) + int(fields[12])) / tick
        except (OSError, ValueError, IndexError):
            continue  # gone meanwhile
    return total


def same_window(events: list) -> float | None:
    """An estimator the app does not show (``--same-window``): speculative tokens/s over
    its whole run against the baseline's over the same stretch of its own time (the
    stretch in which the two took turns, so both met the same machine); None when the
    baseline finished first."""
    from mtp_viz.sources import trace
    spec, ar = trace.spec_and_ar(events)
    done = next(e for e in spec if e.type == "done")
    all_toks = [e for e in ar if e.type == "token"]
    toks = [e for e in all_toks if e.t <= done.seconds]
    if not toks or len(toks) == len(all_toks):
        return None
    return (done.new_tokens / done.seconds) / (len(toks) / toks[-1].t)


def run_trace(page, spec_tps: float) -> list:
    """The run's trace, downloaded from ``#trace-download`` (retried until it is this run's)."""
    from mtp_viz.sources import trace
    for _ in range(40):
        page.wait_for_selector("#trace-download:not([disabled])", timeout=30_000)
        with page.expect_download() as download:
            page.click("#trace-download")
        with tempfile.TemporaryDirectory() as tmp:
            download.value.save_as(Path(tmp) / "t.jsonl")
            events = trace.read(Path(tmp) / "t.jsonl")
        done = next(e for e in events if e.type == "done")
        if abs(done.tokens_per_second - spec_tps) < 0.01:
            return events
        time.sleep(0.25)
    raise RuntimeError("the trace download never showed this run")


def ready_page(browser, port: int, prompt: str, tokens: int, draft: int, wait: float):
    """A 1280×720 page on the app at ``port`` once its pair is ready (``wait`` seconds at
    most), with ``prompt``, ``tokens`` new tokens and ``draft`` drafts set."""
    page = browser.new_page(viewport={"width": 1280, "height": 720})
    deadline = time.monotonic() + wait
    while True:
        try:
            page.goto(f"http://127.0.0.1:{port}/")
            break
        except Exception:  # noqa: BLE001 - not up yet
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)
    page.wait_for_selector("#model-status:has-text('Ready')", timeout=wait * 1000)
    page.fill("#prompt textarea", prompt)
    for inp, value in (("#max-new input[type='number']", tokens), ("#draft-tokens input[type='number']", draft)):
        page.locator(inp).fill(str(value))
        page.locator(inp).press("Enter")
    return page


def app_runs(prompt: str, runs: int, tokens: int, draft: int, threads: int,
             fps: int = 0, windows: list | None = None, pause: float = 0.0
             ) -> tuple[list[float], list[tuple[float, float]]]:
    from playwright.sync_api import sync_playwright
    port = free_port()
    env = {**os.environ, "GRADIO_SERVER_PORT": str(port), "GRADIO_ANALYTICS_ENABLED": "False",
           "MTP_VIZ_THREADS": str(threads), **({"MTP_VIZ_FRAMES_PER_SECOND": str(fps)} if fps else {}),
           "NO_PROXY": "127.0.0.1,localhost", "no_proxy": "127.0.0.1,localhost"}
    proc = subprocess.Popen([sys.executable, str(ROOT / "app.py")], env=env, cwd=ROOT,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    shown, rates = [], []
    try:
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path="/usr/bin/chromium", args=ARGS)
            page = ready_page(browser, port, prompt, tokens, draft, 180)
            browser_cpu = lambda: cpu_seconds(lambda pid, comm: "chrom" in comm)  # noqa: E731
            app_cpu = lambda: cpu_seconds(lambda pid, comm: pid == proc.pid)  # noqa: E731
            for i in range(runs):
                b0, a0, w0 = browser_cpu(), app_cpu(), time.monotonic()
                page.click("#run")
                page.wait_for_selector("#compare:not([data-speedup])", timeout=60_000)  # reset
                page.wait_for_selector("#compare[data-basis='single run']", timeout=300_000)
                d = page.locator("#compare").evaluate("e => ({...e.dataset})")
                x = float(d["speedup"])
                shown.append(x)
                rates.append((float(d["specTps"]), float(d["arTps"])))
                print(f"app run {i + 1}: ×{x:.3f} ({float(d['specTps']):.1f} vs {float(d['arTps']):.1f} tokens/s, "
                      f"{d.get('clock', 'wall')} clock); "
                      f"CPU s: browser {browser_cpu() - b0:.2f}, app {app_cpu() - a0:.2f}, "
                      f"wall {time.monotonic() - w0:.2f}", file=sys.stderr)
                if windows is not None:
                    windows.append(same_window(run_trace(page, float(d["specTps"]))))
                    print(f"  same window: ×{windows[-1]:.3f}" if windows[-1] else "  same window: -",
                          file=sys.stderr)
                time.sleep(pause)  # as a person reads the result, the browser finishes drawing it
            browser.close()
    finally:
        proc.terminate()
        proc.wait(30)
    return shown, rates


def bench(prompt: str, tokens: int, draft: int, threads: int, repeats: int) -> float:
    with tempfile.TemporaryDirectory() as tmp:
        suite = Path(tmp) / "prompt.json"
        suite.write_text(json.dumps({"prompts": [{"id": "p", "category": "code", "text": prompt}]}))
        subprocess.run([sys.executable, "-m", "mtp_viz.cli.main", "bench", "--target", "tiny", "--prompts",
                        str(suite), "--no-chat", "--draft-tokens", str(draft), "--schedules", "constant",
                        "--max-new-tokens", str(tokens), "--repeats", str(repeats), "--threads",
                        str(threads), "--out", tmp, "--no-progress"], check=True, stdout=subprocess.DEVNULL)
        result = json.loads((Path(tmp) / "bench.json").read_text())
    return result["settings"][0]["speedup"]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--prompt-index", type=int, default=0, help="which held-out code prompt")
    ap.add_argument("--max-new-tokens", type=int, default=64)
    ap.add_argument("--draft-tokens", type=int, default=4)
    ap.add_argument("--threads", type=int, default=max(1, (os.cpu_count() or 2) - 1),
                    help="torch threads for the app and the bench (the app's default)")
    ap.add_argument("--bench-repeats", type=int, default=5)
    ap.add_argument("--fps", type=int, default=0,
                    help="MTP_VIZ_FRAMES_PER_SECOND for the app (default: the app's own, 4)")
    ap.add_argument("--same-window", action="store_true",
                    help="also download each run's trace and report same_window()'s estimate")
    ap.add_argument("--pause", type=float, default=0.0,
                    help="seconds between a run's figure and the next click, as a person reads it (the "
                         "browser draws the run's charts meanwhile, on the engine's CPU); default: at once")
    args = ap.parse_args()
    prompt = load_prompts(code_suite())[args.prompt_index].text
    windows = [] if args.same_window else None
    shown, rates = app_runs(prompt, args.runs, args.max_new_tokens, args.draft_tokens, args.threads, args.fps,
                            windows, args.pause)
    ref = bench(prompt, args.max_new_tokens, args.draft_tokens, args.threads, args.bench_repeats)
    med = statistics.median(shown)
    spread = max(shown) / min(shown)
    print(f"app, {args.runs} runs (first cold): " + ", ".join(f"×{x:.2f}" for x in shown))
    print(f"spread max/min {spread:.3f} (goal ≤ 1.15); median ×{med:.3f}; median rates "
          f"{statistics.median(r[0] for r in rates):.1f} (speculative) and "
          f"{statistics.median(r[1] for r in rates):.1f} (autoregressive) tokens/s")
    if windows and all(windows):
        print("same window (not shown by the app): " + ", ".join(f"×{x:.2f}" for x in windows)
              + f"; spread {max(windows) / min(windows):.3f}, median ×{statistics.median(windows):.3f}")
    print(f"mtp-viz bench, same prompt and settings, {args.bench_repeats} repeats: ×{ref:.3f}; "
          f"app median ÷ bench = {med / ref:.3f} (goal 0.85–1.15); {args.threads} torch thread(s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
