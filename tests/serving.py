"""Serving the app inside a test: launch a built demo on a free loopback port."""
from __future__ import annotations

import os
import socket

os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")
for var in ("NO_PROXY", "no_proxy"):
    os.environ[var] = ",".join(filter(None, [os.environ.get(var), "127.0.0.1,localhost"]))


def serve(demo) -> str:
    """Launch ``demo`` as ``mtp-viz ui`` would, without blocking; returns its URL."""
    from mtp_viz.app.page import layout as ui
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ui.launch(demo, host="127.0.0.1", port=port, prevent_thread_lock=True, quiet=True,
              share=False, ssr_mode=False)
    return f"http://127.0.0.1:{port}/"


def serve_modelless():
    """The app with no model to load, served: whatever it shows came from a trace or a
    server. Returns (demo, url); the caller closes the demo."""
    from mtp_viz.app.page import layout as ui
    from mtp_viz.app.runtime import service
    from mtp_viz.errors import UserError

    def load(target, drafter):
        raise UserError("This test app has no model.")

    demo = ui.build_demo(loader=service.PairLoader(load), target="tiny")
    return demo, serve(demo)


def transformers_greedy(prompt: str, n: int) -> list[int]:
    """transformers' own greedy continuation by the bundled target loaded alone, in float32.
    Its load takes the process's build lock like every load in the app beside it: an
    overlapping ``from_pretrained`` would corrupt both (see engine.build)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from mtp_viz.engine.build import building
    from mtp_viz.paths import assets_dir
    folder = assets_dir() / "tiny" / "target"
    with building():
        tok = AutoTokenizer.from_pretrained(folder)
        model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
    ids = tok(prompt, return_tensors="pt")["input_ids"]
    out = model.generate(ids, do_sample=False, max_new_tokens=n, pad_token_id=tok.pad_token_id or 0)
    return out[0, ids.shape[1]:].tolist()


def generate_ids(url: str, prompt: str, n: int, **kw) -> list[int]:
    """The token ids a served app's ``/generate`` gives for ``prompt`` (``n`` new tokens, no chat template)."""
    from gradio_client import Client
    client = Client(url, verbose=False)
    try:
        events = client.predict(prompt=prompt, max_new_tokens=n, chat=False, api_name="/generate", **kw)
    finally:
        client.close()
    assert events[-1]["type"] == "done", events[-1]
    return [e["token_id"] for e in events if e["type"] in ("accepted", "bonus", "token")]
