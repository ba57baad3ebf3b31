"""The detector's checkpoints: what a restart needs, where both engines keep it, and when
the detector has read everything (docs/streams.md, "Checkpoints")."""
