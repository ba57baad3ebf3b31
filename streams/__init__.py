"""Stream processing: the pure detection core (`streams.core`) and what runs it (replay, Faust)."""
