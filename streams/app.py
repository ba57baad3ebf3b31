"""The Faust application around the detection core: telemetry in, incidents and dead letters out.

One agent reads the three telemetry topics as raw bytes, validates each value against the
contract (invalid ones go to the dlq with the reason) and feeds `LiveDetector`. A timer moves
event time on while the streams are quiet and saves the detector's state to a changelog-backed
table, from which a restarted worker resumes. The agent never raises on bad input: a crashed
Faust agent can skip the offset it died on.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import faust

from schemas import DeadLettered, Incident, encode
from schemas.codec import TELEMETRY
from streams.core import Detector, DetectorConfig
from streams.live import LiveConfig, LiveDetector
from streams.snapshots import Snapshots
from trainmedic import metrics
from trainmedic.kafka import parse_message
from trainmedic.settings import KafkaSettings

log = logging.getLogger(__name__)

Sink = Callable[[str, bytes, bytes], Awaitable[None]]


@dataclass
class DetectorStats:
    """What the running detector has done, for logs and metrics."""

    events: int = 0
    dead_lettered: int = 0
    incidents: int = 0


@dataclass(frozen=True)
class DetectorApp:
    """The Faust app and the pieces tests and the CLI reach into."""

    app: faust.App
    live: LiveDetector
    stats: DetectorStats
    process: faust.types.AgentT
    tick: object


def build_app(
    settings: KafkaSettings, *, app_id: str = "trainmedic-detector", config: DetectorConfig | None = None,
    live_config: LiveConfig | None = None, tick_s: float = 0.25, save_every_s: float = 1.0,
    datadir: str | None = None, web_port: int | None = None, sink: Sink | None = None,
) -> DetectorApp:
    """A detector app for `settings` (nothing connects until a worker starts it).

    `sink(topic, key, value)` sends what the detector decides; by default to Kafka through
    Faust's producer (tests in memory pass one that records)."""
    topics = settings.topics
    app = faust.App(
        app_id,
        broker=[f"kafka://{host.strip()}" for host in settings.bootstrap.split(",")],
        store="memory://",
        topic_allow_declare=True,
        topic_disable_leader=True,
        producer_acks=-1,
        web_enabled=web_port is not None,
        web_port=web_port or 6066,
        datadir=datadir,
        broker_max_poll_records=2000,
        stream_buffer_maxsize=16384,
    )
    telemetry = app.topic(
        topics.gpu, topics.node, topics.worker, value_serializer="raw", key_serializer="raw",
    )
    if sink is None:
        outputs = {name: app.topic(name, value_serializer="raw", key_serializer="raw")
                   for name in (topics.incidents, topics.dlq)}

        async def sink(topic: str, key: bytes, value: bytes) -> None:
            await outputs[topic].send(key=key, value=value)
    # One key, one partition: the whole detector is one state (correlation joins node and
    # job telemetry), as zlib-compressed JSON; use_partitioner lets the timer write it outside
    # a stream event.
    state_table = app.Table("detector-state", partitions=1, use_partitioner=True, value_type=bytes)

    live = LiveDetector(Detector(config), live_config or LiveConfig())
    stats = DetectorStats()
    snapshots = Snapshots(state_table, save_every_s)

    async def publish(incidents: list[Incident]) -> None:
        for incident in incidents:
            stats.incidents += 1
            metrics.observe_incident(incident)
            log.info("incident %s %s %s %s job=%s node=%s delay=%.2fs", incident.status, incident.id,
                     incident.category, incident.severity, incident.job, incident.node,
                     incident.ts - incident.first_ts)
            key = (incident.job or incident.node or incident.id).encode()
            await sink(topics.incidents, key, encode(incident))

    @app.agent(telemetry)
    async def process(stream):
        async for event in stream.events():
            snapshots.restore_once(live)
            msg, wall = event.message, time.time()
            parsed = parse_message(topics, msg.topic, msg.partition, msg.offset, msg.key, msg.value,
                                   wall, TELEMETRY)
            if isinstance(parsed, DeadLettered):
                stats.dead_lettered += 1
                metrics.DEAD_LETTERS.labels("detector").inc()
                log.warning("dead-lettered %s[%d]@%d: %s", msg.topic, msg.partition, msg.offset,
                            parsed.reason)
                await sink(topics.dlq, msg.topic.encode(), encode(parsed))
                continue
            stats.events += 1
            metrics.DETECTOR_EVENTS.inc()
            try:
                found = live.feed(parsed.event, (msg.topic, msg.partition), wall)
            except Exception:  # a bug in the core must not stop the pipeline; the event is kept
                log.exception("detector failed on %s[%d]@%d", msg.topic, msg.partition, msg.offset)
                await sink(topics.dlq, msg.topic.encode(), encode(DeadLettered.of(
                    ts=time.time(), reason="detector error (see the detector's log)", topic=msg.topic,
                    partition=msg.partition, offset=msg.offset, key=msg.key, value=msg.value)))
                continue
            if found:
                await publish(found)

    @app.timer(interval=tick_s)
    async def tick():
        if not app.tables.recovery.completed.is_set():
            return  # the state table is still being read back from its changelog
        snapshots.restore_once(live)
        await publish(live.tick(time.time()))
        await snapshots.maybe_save(live, time.monotonic())

    return DetectorApp(app, live, stats, process, tick)
