"""The executor's partition choice matches where the producer's partitioner puts a node's commands."""

import pytest

from trainmedic.bus.producer import EventProducer
from trainmedic.bus.reader import partition_count, partition_of


@pytest.mark.kafka
def test_partition_of_matches_librdkafka_for_keyed_messages(kafka):
    topic = kafka.topics.commands
    partitions = partition_count(kafka, topic)
    landed: dict[str, int] = {}
    producer = EventProducer(kafka)
    keys = [f"node-{i}" for i in range(24)] + ["gpu-a100-017", "n1", "n2", "ünïcode"]
    for key in keys:
        producer.send(topic, b"{}", key=key,
                      on_delivery=lambda err, msg: landed.__setitem__(msg.key().decode(), msg.partition()))
    producer.flush()
    assert partitions == 2
    assert landed == {key: partition_of(key, partitions) for key in keys}
    assert set(landed.values()) == {0, 1}
