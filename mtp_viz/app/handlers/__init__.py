"""Handlers: what the page's events do (runs, recorded runs, the vLLM source, links)."""
