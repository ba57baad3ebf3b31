"""A detector restarted behind a backlog, on a real broker: librdkafka hands over the backlog a
partition at a time, and what the detector holds for ordering fills up. Releasing the oldest early
(out of order) makes the nodes whose telemetry was not read yet look silent: false node_lost
incidents (SEV1) on a healthy cluster. The events ahead of the slowest partition wait instead
(`order_at`), and partitions with too many waiting are not read until they are fed (`pause_at`)."""

from __future__ import annotations

import json
import time

import pytest
from confluent_kafka import Producer

from bus.settings import KafkaSettings
from streams.core import Detector
from streams.live import LiveConfig, LiveDetector
from streams.pipeline import Pipeline
from streams.service import DetectorService, ServiceConfig

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


def detect(kafka: KafkaSettings, app_id: str, events: int) -> tuple[Pipeline, int]:
    """A detector (resuming `app_id`'s checkpoint, if any) until it has read `events` more; then
    stopped (a last checkpoint). The pipeline, and the most it held and had waiting at once."""
    pipeline = Pipeline(kafka.topics, LiveDetector(Detector(), CONFIG))
    most = 0

    def read_all() -> bool:
        nonlocal most
        most = max(most, pipeline.live.buffered)
        return pipeline.stats.events >= events

    DetectorService(kafka, pipeline, ServiceConfig(app_id=app_id, start="earliest")).run(read_all)
    return pipeline, most


def test_a_restart_behind_a_backlog_opens_no_false_incident(kafka: KafkaSettings) -> None:
    app_id, base = f"{kafka.topic_prefix}backlog", time.time()  # event time within max_skew_s of the broker's
    first, _ = detect(kafka, app_id, healthy(kafka, 0, 4, base))
    assert first.stats.incidents == 0 and first.stats.dead_lettered == 0
    # The detector was down for 20 s: every node's telemetry waits on the broker.
    backlog = healthy(kafka, 4, 24, base)
    restarted, most = detect(kafka, app_id, backlog)
    assert restarted.stats.incidents == 0, "a healthy cluster's backlog opened incidents"
    assert restarted.live.forced == 0, "events were released early, out of order"
    assert most < backlog / 4, f"held and waiting {most} of a backlog of {backlog}: partitions not paused"
    assert restarted.live.detector.state.clock > base + 20  # the backlog was decided, not just read
