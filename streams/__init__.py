"""Stream processing: the pure detection core (`trainmedic.streams.core`) and what runs it (replay, the
live detector's two engines)."""
