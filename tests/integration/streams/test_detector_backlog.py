"""A detector restarted behind a backlog, on a real broker: librdkafka hands over the backlog a
partition at a time, and what the detector holds for ordering fills up. Releasing the oldest early
(out of order) makes the nodes whose telemetry was not read yet look silent: false node_lost
incidents (SEV1) on a healthy cluster. The events ahead of the slowest partition wait instead
(`order_at`), partitions with too many waiting are not read until they are fed (`pause_at`), and a
checkpoint leaves what waits to Kafka: stopped half-way and restarted, every event is applied once."""

from __future__ import annotations

import json
import time

import pytest
from confluent_kafka import Producer, TopicPartition
from confluent_kafka.admin import AdminClient, OffsetSpec

from trainmedic.bus.settings import KafkaSettings
from trainmedic.streams.core import Detector
from trainmedic.streams.engines.consumer import DetectorService, ServiceConfig
from trainmedic.streams.live import LiveConfig, LiveDetector
from trainmedic.streams.pipeline import Pipeline

pytestmark = pytest.mark.kafka

NODES, GPUS = 128, 8
# Small enough for this cluster (2,176 events a second) to fill while its backlog is read.
CONFIG = LiveConfig(max_buffered=5_000, order_at=1_000, pause_at=3_000)


def healthy(kafka: KafkaSettings, first_s: int, last_s: int, base: float) -> int:
    """Seconds `first_s` to `last_s` of a healthy cluster: heartbeats, GPU samples and the steps of
    four jobs, each node's at its own moment of the second. Produced as the nodes would, in small
    batches (a node's agent sends a few messages at a time)."""
    out = Producer(kafka.client_config(**{"linger.ms": 5, "batch.size": 16_384}))
    count = 0
    for t in range(first_s, last_s):
        for n in range(NODES):
            ts, node, job = base + t + n / NODES, f"node-{n:03d}", f"job-{n * 4 // NODES}"
            out.produce(kafka.topics.node, json.dumps({"type": "node_heartbeat", "ts": ts, "node": node,
                                                       "interval": 1.0}), node)
            for g in range(GPUS):
                out.produce(kafka.topics.gpu, json.dumps({"type": "gpu_sample", "ts": ts, "node": node,
                                                          "gpu": g, "temp_c": 60.0}), node)
                rank = (n % (NODES // 4)) * GPUS + g
                out.produce(kafka.topics.worker, json.dumps({
                    "type": "worker_step", "ts": ts, "node": node, "job": job, "rank": rank,
                    "world_size": NODES // 4 * GPUS, "generation": 0, "pid": 1000 + rank, "step": t,
                    "step_time": 1.0}), job)
            count += 1 + 2 * GPUS
            out.poll(0)
    assert out.flush(60) == 0
    return count


def ends(kafka: KafkaSettings) -> dict[tuple[str, int], int]:
    """Every telemetry partition's end offset."""
    admin = AdminClient(kafka.client_config())
    topics = admin.list_topics(timeout=10).topics
    names = (kafka.topics.gpu, kafka.topics.node, kafka.topics.worker)
    asked = {TopicPartition(name, p): OffsetSpec.latest() for name in names for p in topics[name].partitions}
    return {(tp.topic, tp.partition): f.result().offset for tp, f in admin.list_offsets(asked).items()}


def detect(kafka: KafkaSettings, app_id: str, waiting_after: int | None = None) -> tuple[Pipeline, int]:
    """A detector (resuming `app_id`'s checkpoint, if any) until it has read every partition to its
    end, or (`waiting_after`) read that many events and has some waiting; then stopped (a last
    checkpoint). The pipeline, and the most it held and had waiting at once."""
    pipeline, end = Pipeline(kafka.topics, LiveDetector(Detector(), CONFIG)), ends(kafka)
    service = DetectorService(kafka, pipeline, ServiceConfig(app_id=app_id, start="earliest"))
    most = 0

    def stop() -> bool:
        nonlocal most
        most = max(most, pipeline.live.buffered)
        if waiting_after is not None and pipeline.stats.events >= waiting_after and pipeline.live.waiting():
            return True
        return all(service.offsets.get(tp, 0) >= offset for tp, offset in end.items())

    service.run(stop)
    return pipeline, most


def test_a_restart_behind_a_backlog_opens_no_false_incident(kafka: KafkaSettings, monkeypatch) -> None:
    applied = []  # every event the core takes, over all the detectors below
    observe_each = Detector.observe_each

    def observing(self, events: list, failed) -> list:
        applied.extend(events)
        return observe_each(self, events, failed)

    monkeypatch.setattr(Detector, "observe_each", observing)
    # in the past, as a real backlog is: event time never runs ahead of the detector's clock
    app_id, base = f"{kafka.topic_prefix}backlog", time.time() - 60
    produced = healthy(kafka, 0, 4, base)
    first, _ = detect(kafka, app_id)
    assert first.stats.incidents == 0 and first.stats.dead_lettered == 0
    # The detector was down for 20 s: every node's telemetry waits on the broker. It is restarted,
    # and stopped again half-way with events waiting (its checkpoint leaves them to Kafka).
    backlog = healthy(kafka, 4, 24, base)
    halfway, most = detect(kafka, app_id, waiting_after=backlog // 2)
    stopped_waiting = sum(halfway.live.waiting().values())
    restarted, most_after = detect(kafka, app_id)
    for run in (halfway, restarted):
        assert run.stats.incidents == 0, "a healthy cluster's backlog opened incidents"
        assert run.live.forced == 0, "events were released early, out of order"
    most = max(most, most_after)
    assert most < backlog / 4, f"held and waiting {most} of a backlog of {backlog}: partitions not paused"
    assert restarted.live.detector.state.clock > base + 20  # the backlog was decided, not just read
    # Each event applied once, or still held or waiting when the last detector stopped.
    assert stopped_waiting > 0, "stopped with nothing waiting: the checkpoint's rewind was not exercised"
    assert len(applied) + restarted.live.buffered == produced + backlog
    assert len({(type(e), e.node, e.ts, getattr(e, "gpu", getattr(e, "rank", None))) for e in applied}) \
        == len(applied)
