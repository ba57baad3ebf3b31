"""The bus layer: Kafka I/O (clients, producers, consumers, the outbox, admin, ACLs) and its settings,
knowing no service; everything above it reaches Kafka only through these modules, and nothing here
imports a service. What code inside a rank may use lives in `common/`, not here.
"""
