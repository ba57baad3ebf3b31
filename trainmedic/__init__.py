"""The `trainmedic` command and the plumbing every service shares: settings, Kafka I/O, broker."""
