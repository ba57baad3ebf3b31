"""The worker runtime's parts: joining, snapshots, restores and faults inside a rank. A training
script imports `trainmedic.runtime` (docs/adopting.md)."""
