"""mtp-viz app: ``python app.py`` (or ``mtp-viz ui``) serves the speculative decoding viewer.

Importing this module builds ``demo`` without loading a model or starting a server.
Environment: MTP_VIZ_TARGET / MTP_VIZ_DRAFTER pick the model pair (hub id or local
folder; default Gemma 4 E2B when cached, else the bundled tiny pair),
GRADIO_SERVER_NAME / GRADIO_SERVER_PORT where to listen, MTP_VIZ_MAX_NEW_TOKENS_CAP
the most tokens one request may ask for, MTP_VIZ_DTYPE the dtype pairs load in.
"""
from mtp_viz.app.page.layout import build_demo, launch

demo = build_demo()

if __name__ == "__main__":
    import sys

    from mtp_viz.errors import UserError
    try:
        launch(demo)
    except UserError as e:  # a misconfiguration (MTP_VIZ_DTYPE, MTP_VIZ_PEERS) is one line, exit 2, as `mtp-viz ui`
        print(f"mtp-viz: error: {e}", file=sys.stderr)
        raise SystemExit(2) from None
