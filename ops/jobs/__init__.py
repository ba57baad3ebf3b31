"""Operator commands for jobs: submit, stop, list, one job's status and its ranks' logs
(docs/coordinator.md#jobs, docs/run.md)."""
