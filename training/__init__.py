"""Training pipeline for the bundled tiny Gemma 4 target + MTP drafter pair (see training/README.md)."""
