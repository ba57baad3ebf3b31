"""The per-node executor: applies signed commands to the job ranks on its node (docs/executor.md).

Pure core: `state` (the worker group state machine) and `decide` (what to do with a
command). Adapters: `ledger` (at-most-once memory), `supervisor` and `leftovers`
(processes), `service` (the Kafka loop), `cli`.
"""
