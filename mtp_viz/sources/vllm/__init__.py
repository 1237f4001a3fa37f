"""A vLLM server as a source: its OpenAI-compatible client, the stream it sends turned
into events, and its Prometheus counters."""
