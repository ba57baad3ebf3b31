"""A synthetic cluster's telemetry for the live detector bench (bench/detector_live.py): 2,048 nodes
x 8 GPUs by default in four jobs, each second one heartbeat per node, one gpu_sample per GPU and
one worker_step per rank, all healthy; produced into a run's own topics as trainmedic's producers
produce.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from confluent_kafka import Producer

from trainmedic.bus.admin import create_topics, remove_prefix
from trainmedic.bus.settings import KafkaSettings
from trainmedic.bus.telemetry_keys import Signer
from trainmedic.schemas.topics import BY_SUFFIX

GPUS, JOBS = 8, 4
TELEMETRY_PARTITIONS = sum(BY_SUFFIX[name].partitions for name in ("telemetry.gpu", "telemetry.node",
                                                                    "telemetry.worker"))
EVENTS_PER_NODE = 1 + 2 * GPUS  # heartbeat, gpu samples, rank steps
GPU = ('{"type":"gpu_sample","v":1,"ts":%.3f,"node":"%s","gpu":%d,"uuid":"GPU-%s-%d","util":97.0,'
       '"mem_used_mb":70000.0,"mem_total_mb":81559.0,"temp_c":%.1f,"power_w":612.5,"ecc_sbe":0,'
       '"ecc_dbe":0,"nvlink_errors":0,"xids":[],"throttle":[]}')
BEAT = '{"type":"node_heartbeat","v":1,"ts":%.3f,"node":"%s","interval":1.0,"links":[]}'
STEP = ('{"type":"worker_step","v":1,"ts":%.3f,"node":"%s","job":"%s","rank":%d,"world_size":%d,'
        '"generation":0,"pid":%d,"step":%d,"step_time":%.3f}')


def cluster_second(topics, nodes: int, t: int, base: float) -> list[tuple[str, str, bytes, str]]:
    """One second of telemetry of `nodes` nodes (a multiple of 4), as (topic, key, value, node), in ts
    order."""
    per_job = nodes // JOBS
    out = []
    for n in range(nodes):
        ts, node = base + t + n / nodes, f"node-{n:05d}"
        out.append((topics.node, node, (BEAT % (ts, node)).encode(), node))
        for g in range(GPUS):
            out.append((topics.gpu, node, (GPU % (ts, node, g, node, g, 60.0 + g)).encode(), node))
        job, first = divmod(n, per_job)
        for g in range(GPUS):
            rank = first * GPUS + g
            out.append((topics.worker, f"job-{job}", (STEP % (
                ts, node, f"job-{job}", rank, per_job * GPUS, 1000 + rank, t, 0.98 + 0.01 * (rank % 5),
            )).encode(), node))
    return out


def fresh_topics(bootstrap: str, run: str) -> KafkaSettings:
    """The admin's settings for the topics of a run of its own (prefixed `run.`), created."""
    settings = KafkaSettings.from_env(role="admin", bootstrap=bootstrap, topic_prefix=f"{run}.")
    create_topics(settings)
    return settings


def producer(settings: KafkaSettings) -> Producer:
    """Configured as trainmedic's producers are (EventProducer), with room for a pre-fill."""
    return Producer(settings.client_config(**{
        "enable.idempotence": True, "acks": "all", "linger.ms": 5, "compression.type": "lz4",
        "queue.buffering.max.messages": 1_000_000,
    }))


def tagger(settings: KafkaSettings) -> Callable[[str, bytes, str], list | None]:
    """(topic, value, node) -> the record's headers: its node's MAC, as a node's producer writes it
    (bus/telemetry_keys.py), when the settings hold the telemetry master key (a secure local broker's
    admin), else none."""
    if settings.telemetry_key is None:
        return lambda topic, node, value: None
    signer = Signer(settings.telemetry_key, settings.topic_prefix)
    return lambda topic, value, node: signer.headers(value, node)


def prefill(settings: KafkaSettings, nodes: int, seconds: int) -> int:
    """The last `seconds` of the cluster's telemetry, ending now, produced as fast as the broker
    takes it.

    Event time ends now: an event ahead of its message's broker timestamp or of the detector's
    clock (or more than max_skew_s behind it) is dead-lettered and logged (`Pipeline`), which is
    not what a drain measures."""
    out, count, base, tags = producer(settings), 0, time.time() - seconds, tagger(settings)
    for t in range(seconds):
        for topic, key, value, node in cluster_second(settings.topics, nodes, t, base):
            while True:
                try:
                    out.produce(topic, value, key, headers=tags(topic, value, node))
                    break
                except BufferError:
                    out.poll(0.05)
            count += 1
        out.poll(0)
    if out.flush(120):
        raise RuntimeError("pre-fill not delivered")
    return count


def delete_run(settings: KafkaSettings, run: str) -> None:
    """The run's topics, the workers' own (their app ids start with the run) included."""
    remove_prefix(settings, run)
