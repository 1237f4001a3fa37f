"""Front end: the ``mtp-viz`` command line (generate, replay, bench, ui)."""
