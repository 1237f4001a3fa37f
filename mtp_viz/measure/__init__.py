"""Measurement: timed runs, their records, and the numbers they reduce to.

Below every front end, above the sources: ``mtp-viz bench``, the app's Measure and
Traffic panels and the notebook all measure through this package, so one setup gives one
number everywhere. Runs go through the same sources as every other run
(:func:`mtp_viz.sources.local.run_mode`, :class:`mtp_viz.sources.vllm.source.VllmSource`),
under the same mode names (``speculative``, ``autoregressive``; ``reference`` is
transformers' own assisted ``generate``).

- :mod:`.records`: a setting, a timed run's record and the key that groups runs;
- :mod:`.runner`: one timed run of a pair in any mode;
- :mod:`.session`: a bench's interleaved runs (rotation, warm-up, greedy parity);
- :mod:`.reduce`: records and events to typed rows (pooled rates, medians, theory);
- :mod:`.arms`: several precision pairs (and engines) in one run, each reduced on its own;
- :mod:`.compare`: the app's Measure (both modes, N interleaved repeats, a verdict);
- :mod:`.server`: a vLLM server's runs and their reduction; :mod:`.traffic`: the
  concurrency sweep.

Nothing here prints, parses flags or draws: the front ends do.
"""
