"""Recovery: the per-node executor, command signing, and the worker runtime training scripts use."""
