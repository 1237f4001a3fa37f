"""The Gradio app: its page, handlers and runtime (the pure views it draws with are
:mod:`mtp_viz.views`). Nothing here imports torch: models load through
:mod:`mtp_viz.sources.models` only when a run first needs them (see :mod:`mtp_viz.app.runtime.service`)."""
