"""The per-node executor: applies signed commands to the job ranks on its node (docs/executor.md).
Pure core in `core/` (`state`, `decide`); adapters: `ledger`, `supervisor`, `leftovers`, `service`, `cli`.
"""
