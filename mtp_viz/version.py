"""The package's version: ``mtp_viz.__version__``, and what a trace's header records.
Every layer may use it; it imports nothing."""
__version__ = "0.1.0"
