"""Pure views: events in, HTML or figures out. Nothing here imports gradio or torch."""
