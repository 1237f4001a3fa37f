"""Time from ``python app.py`` starting until the page answers and the model pair is loaded.

    python benchmarks/app_startup.py                 # bundled tiny pair, or a random one
    python benchmarks/app_startup.py --target /path/to/target --drafter /path/to/drafter

The app prints ``mtp-viz: ... model pair ready`` on stderr once its background load
finishes; the page is polled over HTTP. Repeats and reports the median.
"""
from __future__ import annotations

import argparse
import os
import socket
import statistics
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def once(env: dict[str, str]) -> tuple[float, float]:
    port = free_port()
    env = {**env, "GRADIO_SERVER_NAME": "127.0.0.1", "GRADIO_SERVER_PORT": str(port)}
    t0 = time.perf_counter()
    proc = subprocess.Popen([sys.executable, str(ROOT / "app.py")], env=env, cwd=ROOT,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    loaded: list[float] = []

    def watch() -> None:
        for line in proc.stderr:  # type: ignore[union-attr]
            if line.startswith("mtp-viz:"):
                loaded.append(time.perf_counter() - t0)
                if "ready" not in line:
                    print("load failed:", line.strip(), file=sys.stderr)

    threading.Thread(target=watch, daemon=True).start()
    page = None
    try:
        while time.perf_counter() - t0 < 120 and (page is None or not loaded):
            if page is None:
                try:
                    with urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=1) as r:
                        if r.status == 200:
                            page = time.perf_counter() - t0
                except OSError:
                    pass
            time.sleep(0.05)
    finally:
        proc.terminate()
        proc.wait(10)
    if page is None or not loaded:
        raise SystemExit("the app did not come up within 120 s")
    return page, loaded[0]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--target")
    ap.add_argument("--drafter")
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    env = {**os.environ, "GRADIO_ANALYTICS_ENABLED": "False",
           "NO_PROXY": "127.0.0.1,localhost", "no_proxy": "127.0.0.1,localhost"}
    if args.target:
        env["MTP_VIZ_TARGET"] = args.target
        if args.drafter:
            env["MTP_VIZ_DRAFTER"] = args.drafter
    runs = [once(env) for _ in range(args.repeats)]
    for page, loaded in runs:
        print(f"page answers after {page:.1f} s, model pair loaded after {loaded:.1f} s")
    print(f"median: interactive (page up and model loaded) after "
          f"{statistics.median(max(p, m) for p, m in runs):.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
