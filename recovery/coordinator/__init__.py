"""The recovery coordinator: its pure core (`core`), the Kafka adapter around it (`kafka_adapter`)
and the command that runs it (`cli`). docs/coordinator.md."""
