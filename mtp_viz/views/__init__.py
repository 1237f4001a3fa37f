"""Pure views: events in, HTML or figures out. Nothing here imports gradio or torch.

Below every front end: the app's page, the notebook's inline cells and the bench's
reports draw with the same views (tests/test_layers.py)."""
