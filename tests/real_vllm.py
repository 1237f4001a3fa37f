"""The real vLLM servers the tests marked ``vllm`` run against (see sources/test_vllm.py):
MTP_VIZ_VLLM_URL with Gemma 4 MTP, MTP_VIZ_VLLM_BASELINE_URL without speculation."""
from __future__ import annotations

import json
import os

import pytest

from mtp_viz.paths import assets_dir

PROMPTS = [p["prompt"] for p in json.loads((assets_dir() / "tiny" / "eval_prompts.json").read_text())["prompts"]][:4]


def server_url(var: str) -> str:
    """The URL in the environment variable ``var``; without it the test is skipped, or
    fails under CI (which must have started the servers)."""
    url = os.environ.get(var)
    if not url:
        if os.environ.get("CI"):
            pytest.fail(f"{var} is not set: CI must start the vLLM servers before these tests")
        pytest.skip(f"set {var} to a running vLLM server")
    return url
