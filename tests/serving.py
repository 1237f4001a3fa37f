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
    from mtp_viz.app.runtime import service
    from mtp_viz.app.page import layout as ui
    from mtp_viz.errors import UserError

    def load(target, drafter):
        raise UserError("This test app has no model.")

    demo = ui.build_demo(loader=service.PairLoader(load), target="tiny")
    return demo, serve(demo)
