"""This machine's deployment: the local Kafka broker, Prometheus and Alertmanager, and a simulated
cluster of nodes (docs/demo.md)."""
