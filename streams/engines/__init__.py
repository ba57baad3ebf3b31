"""The detector's four engines: the consumer loop, Faust, and a sharded deployment's ingest
and decide stages (docs/streams.md)."""
