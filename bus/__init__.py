"""The bus layer: Kafka I/O, settings, errors, signals, time spans and config, knowing no service.

Everything above it (producers, the detector, recovery, ops, the `trainmedic` command) reaches
Kafka only through these modules; nothing here imports a service.
"""
