"""The executor's pure core: a job's local state machine, the decision for one command, admission,
what a rank may report and what a restart adopts. No Kafka, no processes (docs/executor.md)."""
