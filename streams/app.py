"""The Faust engine of the detector: the same pipeline as `streams/service.py`, in a Faust app.

One agent reads the three telemetry topics as raw bytes and hands each message to `Pipeline`
(validation, dead letters, `LiveDetector`, incidents). A timer moves event time on while the
streams are quiet and saves the detector's state to a changelog-backed table, from which a
restarted worker resumes. Faust's per-message path is slower than the plain consumer loop
(docs/streams.md, "Throughput"): `trainmedic detector --engine faust` selects this one.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import faust

from bus.settings import KafkaSettings
from streams.core import Detector, DetectorConfig
from streams.live import LiveConfig, LiveDetector
from streams.pipeline import DetectorStats, Pipeline
from streams.snapshots import Snapshots

Sink = Callable[[str, bytes, bytes], Awaitable[None]]


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
    pipeline = Pipeline(topics, live)
    snapshots = Snapshots(state_table, save_every_s)

    @app.agent(telemetry)
    async def process(stream):
        async for event in stream.events():
            snapshots.restore_once(live)
            msg = event.message
            for out in pipeline.on_message(msg.topic, msg.partition, msg.offset, msg.key, msg.value,
                                           time.time()):
                await sink(out.topic, out.key, out.value)

    @app.timer(interval=tick_s)
    async def tick():
        if not app.tables.recovery.completed.is_set():
            return  # the state table is still being read back from its changelog
        snapshots.restore_once(live)
        for out in pipeline.on_tick(time.time()):
            await sink(out.topic, out.key, out.value)
        await snapshots.maybe_save(live, time.monotonic())

    return DetectorApp(app, live, pipeline.stats, process, tick)
