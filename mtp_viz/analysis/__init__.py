"""Analysis: pure functions over events (metrics, what-if, anatomy, stream slicing, the
terminal view)."""
