"""The consumer engine in this process, on a real broker: where it starts reading, and partitions
that appear or lose data under it."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator

import pytest
from confluent_kafka import Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewPartitions

import trainmedic.schemas as s
from trainmedic.bus.admin import ensure_topic
from trainmedic.bus.settings import KafkaSettings
from trainmedic.streams.checkpoints.contents import encode_checkpoint
from trainmedic.streams.checkpoints.topic import CHECKPOINT_TOPIC_CONFIG
from trainmedic.streams.core import Detector
from trainmedic.streams.engines.consumer import DetectorService, ServiceConfig
from trainmedic.streams.live import LiveDetector
from trainmedic.streams.pipeline import Pipeline

pytestmark = pytest.mark.kafka


@pytest.fixture
def service(kafka: KafkaSettings) -> Iterator[Callable[..., DetectorService]]:
    """Runs DetectorService in a thread; stops it (last checkpoint, clean close) after the test."""
    stop, threads, errors = threading.Event(), [], []

    def start(**config) -> DetectorService:
        pipeline = Pipeline(kafka.topics, LiveDetector(Detector()))
        svc = DetectorService(kafka, pipeline, ServiceConfig(**config))

        def run() -> None:
            try:
                svc.run(stop.is_set)
            except Exception as err:  # noqa: BLE001 - reported by the test
                errors.append(err)

        threads.append(threading.Thread(target=run, daemon=True))
        threads[-1].start()
        return svc

    yield start
    stop.set()
    for thread in threads:
        thread.join(60)
    assert not errors, errors


def beats(kafka: KafkaSettings, partition: int, count: int) -> None:
    out = Producer(kafka.client_config())
    for n in range(count):
        value = s.encode(s.NodeHeartbeat(ts=1000.0 + n, node=f"node-{partition}", interval=1.0))
        out.produce(kafka.topics.node, value, f"node-{partition}", partition=partition)
    assert out.flush(30) == 0


def until(check: Callable[[], bool], give_up_s: float = 60) -> None:
    deadline = time.monotonic() + give_up_s
    while not check():
        assert time.monotonic() < deadline, "not within the time allowed"
        time.sleep(0.1)


def test_partitions_added_while_it_runs_are_read_from_their_beginning(
    kafka: KafkaSettings, service, caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="trainmedic.streams.engines.consumer")
    svc = service(app_id=f"{kafka.topic_prefix}svc", start="earliest", partitions_every_s=3.0)
    until(lambda: len(svc.offsets) == 6)  # the fixture's topics have 2 partitions each
    admin = AdminClient(kafka.client_config())
    for future in admin.create_partitions([NewPartitions(kafka.topics.node, 3)]).values():
        future.result()
    beats(kafka, partition=2, count=5)
    written = time.time()
    until(lambda: svc.offsets.get((kafka.topics.node, 2)) == 5)
    assert svc.pipeline.stats.events == 5
    [found] = [r for r in caplog.records if "added since the start" in r.getMessage()]
    assert found.created > written, "the partition was found before the beats were in it: inconclusive"


def test_a_checkpoint_offset_that_retention_removed_resumes_at_what_is_left(
    kafka: KafkaSettings, service, caplog: pytest.LogCaptureFixture,
) -> None:
    app_id = f"{kafka.topic_prefix}svc"
    beats(kafka, partition=0, count=10)
    beats(kafka, partition=1, count=3)  # a partition the checkpoint does not know: read from its start
    admin = AdminClient(kafka.client_config())
    for future in admin.delete_records([TopicPartition(kafka.topics.node, 0, 6)]).values():
        future.result()
    # A checkpoint that had read up to offset 2 of node[0] and knew no other partition.
    ensure_topic(kafka, f"{app_id}-checkpoints", partitions=1, config=CHECKPOINT_TOPIC_CONFIG)
    saved = encode_checkpoint(LiveDetector(Detector()), {(kafka.topics.node, 0): 2}, time.time())
    out = Producer(kafka.client_config())
    out.produce(f"{app_id}-checkpoints", saved, app_id)
    assert out.flush(30) == 0

    svc = service(app_id=app_id)  # the default start, latest, applies to a first start only
    until(lambda: svc.pipeline.stats.events == 4 + 3)  # node[0] offsets 6..9, node[1] 0..2
    assert svc.offsets[(kafka.topics.node, 0)] == 10 and svc.offsets[(kafka.topics.node, 1)] == 3
    assert "node[0]: offset 2 is gone (the partition holds 6..10): reading from 6" in caplog.text
