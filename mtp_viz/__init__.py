"""mtp-viz: see speculative decoding with Gemma 4 MTP drafters happen, and measure it.

Nothing is imported eagerly: ``import mtp_viz`` loads no model and no torch.
"""
__version__ = "0.1.0"
