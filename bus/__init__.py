"""The bus layer: Kafka I/O, settings, errors, signals, time spans and config, knowing no service;
everything above it reaches Kafka only through these modules, and nothing here imports a service.
"""
