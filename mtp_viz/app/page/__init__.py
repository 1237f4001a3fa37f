"""The page: Gradio layout of the app's sections."""
