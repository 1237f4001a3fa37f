"""Runtime: the worker threads, the model service, Measure, ZeroGPU and the URL guard."""
