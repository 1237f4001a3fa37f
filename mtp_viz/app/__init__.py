"""The Gradio app and its pure views. Nothing here imports torch: models load through
:mod:`mtp_viz.sources.models` only when a run first needs them (see :mod:`.service`)."""
