"""llama.cpp's llama-server for the tests marked ``llamacpp`` (tests/sources/test_gguf_llamacpp.py):
the build that ``scripts/llamacpp.sh`` keeps in $MTP_VIZ_LLAMA_CPP_DIR (default
~/.cache/mtp-viz/llama.cpp-11434). Each test starts the servers it needs on the GGUF files
it wrote, one thread each, on a free loopback port, and stops them by their own process id."""
from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import tempfile
import time
import urllib.request
from pathlib import Path

import pytest

OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))   # loopback: never a proxy
START = 180   # seconds a server may take to load (a loaded 2-core machine)


def kept_folder() -> Path:
    default = Path.home() / ".cache" / "mtp-viz" / "llama.cpp-11434"
    return Path(os.environ.get("MTP_VIZ_LLAMA_CPP_DIR") or default).expanduser()


def llama_server() -> str:
    """The built llama-server; without it the test is skipped, or fails under CI (which
    builds it with scripts/llamacpp.sh first)."""
    path = kept_folder() / "build" / "bin" / "llama-server"
    if not os.access(path, os.X_OK):
        message = f"no llama-server at {path}: run `bash scripts/llamacpp.sh` (or set MTP_VIZ_LLAMA_CPP_DIR)"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    return str(path)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def call(url: str, path: str, body: dict | None = None, timeout: float = 120) -> dict:
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url + path, data=data, headers={"Content-Type": "application/json"})
    with OPENER.open(request, timeout=timeout) as response:
        return json.loads(response.read())


@contextlib.contextmanager
def serving(model, *args: str):
    """A llama-server on ``model`` (plus ``args``), ready; yields its URL."""
    port = free_port()
    log = tempfile.NamedTemporaryFile("w+", suffix=".log", delete=False)
    command = [llama_server(), "-m", str(model), *args, "-t", "1", "-tb", "1", "-c", "1024", "-np", "1",
               "--host", "127.0.0.1", "--port", str(port)]
    proc = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + START
        while True:
            if proc.poll() is not None:
                log.seek(0)
                pytest.fail(f"llama-server exited with {proc.returncode}:\n" + log.read()[-3000:])
            with contextlib.suppress(OSError, ValueError):
                if call(url, "/health", timeout=5).get("status") == "ok":
                    break
            if time.monotonic() > deadline:
                pytest.fail(f"llama-server did not answer /health within {START} s")
            time.sleep(0.5)
        yield url
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)   # its own session: only this server goes
        proc.wait(timeout=30)
        log.close()
        os.unlink(log.name)


def greedy(url: str, ids: list[int], n: int = 64) -> dict:
    """llama.cpp's greedy continuation of the token ids (no cached prompt between requests)."""
    return call(url, "/completion", {"prompt": ids, "n_predict": n, "temperature": 0, "top_k": 1,
                                     "cache_prompt": False, "return_tokens": True})
