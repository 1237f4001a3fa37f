"""The clients of the load test (``load_test.py``): ``python app.py`` as a subprocess,
``/generate`` through ``gradio_client`` (polled with a deadline, never iterated: a
job's iterator has none) and through Gradio's plain HTTP API (``POST
/gradio_api/call/generate``, then its event stream), including a client that closes the
stream mid-run as a closed tab does. Every wait has a deadline."""
from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TOKENS = 32  # new tokens for a normal request
API_ORDER = ("prompt", "model", "mode", "drafter", "max_new_tokens", "draft_tokens", "schedule",
             "temperature", "top_p", "top_k", "seed", "chat")  # api_generate's parameters, in order
API_DEFAULTS = dict(model="", mode="speculative", drafter="auto", max_new_tokens=TOKENS, draft_tokens=4,
                    schedule="constant", temperature=0.0, top_p=1.0, top_k=0, seed=None, chat=False)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def token_ids(events: list[dict]) -> list[int]:
    return [e["token_id"] for e in events if e["type"] in ("accepted", "bonus", "token")]


class Server:
    """``python app.py`` on a free loopback port with the bundled tiny pair."""

    def __init__(self, threads: int = 1, env: dict | None = None):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}/"
        self.log = tempfile.NamedTemporaryFile("w+", prefix="mtp-viz-load-", suffix=".log")
        env = {**os.environ, "GRADIO_SERVER_NAME": "127.0.0.1", "GRADIO_SERVER_PORT": str(self.port),
               "MTP_VIZ_TARGET": "tiny", "MTP_VIZ_THREADS": str(threads), "GRADIO_ANALYTICS_ENABLED": "False",
               "HF_HUB_OFFLINE": "1", "NO_PROXY": "127.0.0.1,localhost", "no_proxy": "127.0.0.1,localhost",
               **(env or {})}
        env.pop("MTP_VIZ_DRAFTER", None)
        self.proc = subprocess.Popen([sys.executable, str(ROOT / "app.py")], env=env, cwd=ROOT,
                                     stdout=self.log, stderr=subprocess.STDOUT)

    def rss_mb(self) -> float:
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
        return float("nan")

    def log_tail(self, n: int = 20) -> str:
        self.log.seek(0)
        return "".join(self.log.readlines()[-n:])

    def wait_ready(self, timeout: float) -> None:
        """Until the app prints that its pair is loaded (or fails, or the deadline passes)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            tail = self.log_tail(50)
            if "model pair ready" in tail:
                return
            if self.proc.poll() is not None or "mtp-viz: tiny:" in tail:
                raise SystemExit("the app failed to start:\n" + tail)
            time.sleep(0.2)
        raise SystemExit(f"the app was not ready within {timeout:.0f} s:\n" + self.log_tail())

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(15)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(15)
        self.log.close()


def call(url: str, kw: dict, timeout: float, client=None) -> tuple[list[dict], float | None, float]:
    """One ``/generate`` request through ``gradio_client``: (final events, queue wait,
    latency). The job is polled, never iterated (its iterator has no deadline); raises
    TimeoutError when no final value arrives within ``timeout`` seconds."""
    from gradio_client import Client
    own = client is None
    client = client or Client(url, verbose=False)
    try:
        t0 = time.monotonic()
        job = client.submit(**{**API_DEFAULTS, **kw}, api_name="/generate")
        wait = None
        while not job.done():
            if wait is None and job.outputs():
                wait = time.monotonic() - t0
            if time.monotonic() - t0 > timeout:
                raise TimeoutError(f"no final value within {timeout:.0f} s")
            time.sleep(0.02)
        events = job.result(timeout=5)
        latency = time.monotonic() - t0
        return events, latency if wait is None else wait, latency
    finally:
        if own:
            client.close()


def _post(http, url: str, kw: dict) -> str:
    """Queue a ``/generate`` call over Gradio's plain HTTP API (each one is a new Gradio
    session); returns the id whose event stream carries its values."""
    args = {**API_DEFAULTS, **kw}
    r = http.post(url + "gradio_api/call/generate", json={"data": [args[k] for k in API_ORDER]})
    r.raise_for_status()
    return r.json()["event_id"]


def _stream(http, url: str, event_id: str, timeout: float):
    """(SSE event name, data) pairs of a call's event stream, until ``timeout`` seconds."""
    t0, event = time.monotonic(), ""
    with http.stream("GET", url + f"gradio_api/call/generate/{event_id}") as stream:
        for line in stream.iter_lines():
            if time.monotonic() - t0 > timeout:
                raise TimeoutError(f"no final value within {timeout:.0f} s")
            if line.startswith("event:"):
                event = line.split(":", 1)[1].strip()
            elif line.startswith("data:") and event in ("generating", "complete", "error"):
                yield event, line[5:].strip()


def plain_call(http, url: str, kw: dict, timeout: float) -> list[dict]:
    """One ``/generate`` call over the plain HTTP API: its final list of events."""
    for event, data in _stream(http, url, _post(http, url, kw), timeout):
        if event != "generating":
            return json.loads(data)[0] if event == "complete" else [{"type": "http error", "message": data}]
    raise RuntimeError("the stream closed without a final value")


def leave(http, url: str, kw: dict, timeout: float) -> float:
    """Start a run over the plain HTTP API, read its event stream until the first
    generated value, then close the connection (a tab closed mid-run). Returns the wait."""
    t0 = time.monotonic()
    stream = _stream(http, url, _post(http, url, kw), timeout)
    try:
        for event, _ in stream:
            if event != "generating":
                raise RuntimeError(f"the stream ended with {event!r} before the client left")
            return time.monotonic() - t0
        raise RuntimeError("the stream closed before any generated value")
    finally:
        stream.close()  # closes the connection: the client has left


def http_client():
    import httpx
    return httpx.Client(timeout=httpx.Timeout(30.0), trust_env=False)


class Trickler:
    """A visitor in headless Chromium who points the app's vLLM source at a server that
    trickles keep-alive comments and never a token (``tests/hostile.py``), presses Run
    and keeps the tab open: a remote run that holds its slot for as long as it waits.
    Playwright's sync API: use it from one thread only."""

    def __init__(self, app_url: str):
        sys.path.insert(0, str(ROOT / "tests"))
        from playwright import sync_api

        from browsing import ARGS, CHROMIUM, open_app
        from hostile import MODELS, SPEC_METRICS, serve, trickle
        self.silent, self.server_url = serve({"/v1/models": json.dumps(MODELS), "/metrics": SPEC_METRICS,
                                              "/v1/completions": trickle(every=0.5, most=1200)})  # 10 min at most
        self._pw = sync_api.sync_playwright().start()
        self._browser = self._pw.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        self.page = open_app(self._browser, app_url)
        self.page.click("#model input")
        self.page.get_by_role("option", name="vLLM or llama.cpp server (enter its URL)").click()
        self.page.locator("#vllm-url").get_by_role("textbox").fill(self.server_url)

    def start(self) -> None:
        """Press Run; return once the run waits on the server for its first token."""
        self.page.click("#run")
        self.page.wait_for_selector("#spec-output:has-text('Waiting for the server')", timeout=60_000)

    def waiting(self) -> bool:
        """Is the run still waiting on the silent server (holding its slot)?"""
        return "Waiting for the server" in self.page.inner_text("#spec-output")

    def stop(self) -> str:
        """Press Stop; the status line once the run has ended."""
        self.page.click("#stop")
        self.page.wait_for_selector("#status:has-text('Stopped.')", timeout=60_000)
        return self.page.inner_text("#status")

    def close(self) -> None:
        self._browser.close()
        self._pw.stop()
        self.silent.shutdown()
        self.silent.server_close()


class Compiler:
    """A visitor in headless Chromium who picks ``precision`` for both models, ticks
    Compiled engine and presses Run: a pair to load and compile (a minute or more on a
    cold inductor cache) before that visitor's run starts. Playwright's sync API: use it
    from one thread only."""

    def __init__(self, app_url: str, precision: str = "bfloat16"):
        sys.path.insert(0, str(ROOT / "tests"))
        from playwright import sync_api

        from browsing import ARGS, CHROMIUM, open_app, open_settings
        self._pw = sync_api.sync_playwright().start()
        self._browser = self._pw.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        self.page = open_app(self._browser, app_url)
        open_settings(self.page)
        for field in ("target-precision", "drafter-precision"):
            self.page.click(f"#{field} input")
            self.page.locator(f"#{field}").get_by_role("option", name=precision, exact=True).click()
        self.page.locator("#engine").get_by_label("compiled engine").check()
        self.page.fill("#prompt textarea", "def parse(line):\n")

    def start(self) -> None:
        """Press Run; return once the page says the pair is compiling."""
        self.page.click("#run")
        # "Loading … (then compiling its graphs …)", then "Compiling … graph k of n …"
        self.page.wait_for_selector("#status:has-text('compiling')", timeout=120_000)  # either case

    def compiling(self) -> bool:
        """Is the visitor's pair still loading or compiling (its run not started)?"""
        return "compiling" in self.page.inner_text("#status").lower()

    def finish(self, timeout: float) -> str:
        """Wait for the visitor's run to end; its #compare engine ("compiled" or not)."""
        self.page.wait_for_selector("#status:has-text('Done')", timeout=timeout * 1000)
        return self.page.locator("#compare").get_attribute("data-engine") or ""

    def close(self) -> None:
        self._browser.close()
        self._pw.stop()
