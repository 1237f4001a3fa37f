"""Sources: everything that turns a run's settings into an event stream (a local model
pair, a vLLM server, a recorded trace)."""
