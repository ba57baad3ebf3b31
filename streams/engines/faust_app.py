"""The Faust engine of the detector (`--engine faust`): the same pipeline and checkpoints as
`streams/engines/consumer.py`, in a Faust app on uvloop (docs/streams.md, "Two engines, one pipeline",
"Faust at full speed (issue 18)").
"""

from __future__ import annotations

import asyncio
import logging
import ssl
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path

import faust

from trainmedic.bus.message import RawMessage
from trainmedic.bus.settings import KafkaSettings
from trainmedic.bus.telemetry_keys import verifier_of
from trainmedic.common.errors import ConfigError
from trainmedic.streams.checkpoints.contents import Offsets
from trainmedic.streams.checkpoints.faust_engine import FaustCheckpoints
from trainmedic.streams.core import Detector, DetectorConfig
from trainmedic.streams.live import LiveConfig, LiveDetector
from trainmedic.streams.pipeline import DetectorStats, Output, Pipeline
from trainmedic.streams.placements import placements_of
from trainmedic.streams.read_check import ReadCheck

log = logging.getLogger(__name__)

Sink = Callable[[str, bytes, bytes], Awaitable[None]]


@dataclass(frozen=True)
class FaustTuning:
    """How a Faust worker reads: its event loop (a `mode.loop` name: "uvloop", or "aio" for
    asyncio's own) and the consumer settings that bound how much is fetched and buffered.

    uvloop is what moved Faust's rate; fetching is a small part of its per-message path, and
    larger fetch and buffer sizes measured within the noise (docs/streams.md, "Throughput")."""

    loop: str = "uvloop"
    max_poll_records: int = 2000  # per getmany: Faust hands them to the agent one by one anyway
    max_fetch_bytes: int = 1024**2  # per partition and fetch (Faust's default)
    buffer_maxsize: int = 16384  # messages a stream may hold before Faust pauses its partitions

    def app_settings(self) -> dict[str, int]:
        """These as `faust.App` settings."""
        return {"broker_max_poll_records": self.max_poll_records,
                "consumer_max_fetch_size": self.max_fetch_bytes,
                "stream_buffer_maxsize": self.buffer_maxsize}


@dataclass(frozen=True)
class DetectorApp:
    """The Faust app and the pieces tests and the CLI reach into."""

    app: faust.App
    live: LiveDetector
    stats: DetectorStats
    offsets: Offsets  # next offset to read, per telemetry partition, as the live state reflects
    process: faust.types.AgentT
    tick: object


def build_app(
    settings: KafkaSettings, *, app_id: str, config: DetectorConfig | None = None,
    live_config: LiveConfig | None = None, tick_s: float = 0.25, save_every_s: float = 1.0,
    datadir: str | None = None, web_port: int | None = None, sink: Sink | None = None,
    tuning: FaustTuning = FaustTuning(), keys_dir: Path | None = None,
) -> DetectorApp:
    """A detector app for `settings` (nothing connects until a worker starts it).

    `sink(topic, key, value)` sends what the detector decides; by default to Kafka through
    Faust's producer (tests in memory pass one that records, and nothing is checkpointed).
    `keys_dir`: the coordinator's public keys, which placements are checked with (None: not checked)."""
    topics = settings.topics
    app = faust.App(
        app_id,
        broker=[f"kafka://{host.strip()}" for host in settings.bootstrap.split(",")],
        broker_credentials=faust_credentials(settings),
        store="memory://",
        topic_allow_declare=True,
        topic_disable_leader=True,
        producer_acks=-1,
        web_enabled=web_port is not None,
        web_port=web_port or 6066,
        datadir=datadir,
        **tuning.app_settings(),
    )
    telemetry = app.topic(
        topics.gpu, topics.node, topics.worker, value_serializer="raw", key_serializer="raw",
    )
    placed = None if keys_dir is None else placements_of(keys_dir, topics.prefix, log)
    live = LiveDetector(Detector(config, placed=placed), live_config or LiveConfig())
    pipeline = Pipeline(topics, live, verifier=verifier_of(settings.telemetry_key, topics.prefix, log))
    offsets: Offsets = {}
    # The agent and the timer take turns: a checkpoint sees no message half handled.
    turn = asyncio.Lock()
    checkpoints = reads = None
    if sink is None:
        outputs = {name: app.topic(name, value_serializer="raw", key_serializer="raw")
                   for name in (topics.incidents, topics.dlq)}

        async def sink(topic: str, key: bytes, value: bytes) -> None:
            checkpoints.sent(await outputs[topic].send(key=key, value=value))

        checkpoints = FaustCheckpoints(app, settings, app_id, live, offsets, every_s=save_every_s)
        app.on_rebalance_complete.connect(checkpoints.on_rebalance_complete)
        # Blind is not dead here too: the wall clock becomes event time only as far as reads are
        # known complete (a restarted worker's backlog, a broker away), as in the consumer engine.
        reads = ReadCheck(settings)
        live.watch_reads()

    async def send(outs: list[Output]) -> None:
        for out in outs:
            await sink(out.topic, out.key, out.value)

    @app.agent(telemetry)
    async def process(stream):
        async for event in stream.events():
            msg = event.message
            async with turn:
                outs = pipeline.on_message(RawMessage(
                    msg.topic, msg.partition, msg.offset, int(msg.timestamp * 1000), msg.key, msg.value,
                ), time.time(), msg.headers)
                offsets[(msg.topic, msg.partition)] = msg.offset + 1
                await send(outs)

    @app.timer(interval=tick_s)
    async def tick():
        if checkpoints is not None:
            if not checkpoints.restored:
                return  # the checkpoint is read when partitions are first assigned
            await checkpoints.standby()  # one worker of several with the app id reads nothing
        async with turn:
            if reads is not None and (complete := checkpoints.reads_complete(reads, time.time())) is not None:
                live.caught_up(complete)
            await send(pipeline.on_tick(time.time()))
        if checkpoints is not None:
            await checkpoints.maybe_save(time.monotonic(), turn)

    return DetectorApp(app, live, pipeline.stats, offsets, process, tick)


def faust_credentials(settings: KafkaSettings) -> faust.types.auth.CredentialsT | None:
    """The librdkafka security settings (`security.protocol`, `sasl.*`, `ssl.ca.location`) as
    Faust's (aiokafka's) credentials; None for a plain broker."""
    config = {k: str(v) for k, v in settings.client_config().items()}
    protocol = config.get("security.protocol", "PLAINTEXT").upper()
    mechanism = config.get("sasl.mechanism", "PLAIN").upper()
    if protocol == "PLAINTEXT":
        return None
    context = ssl.create_default_context(cafile=config.get("ssl.ca.location"))
    if protocol == "SSL":
        return faust.SSLCredentials(context)
    if protocol.startswith("SASL_") and mechanism in ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"):
        return faust.SASLCredentials(username=config.get("sasl.username", ""),
                                     password=config.get("sasl.password", ""), mechanism=mechanism,
                                     ssl_context=context if protocol == "SASL_SSL" else None)
    raise ConfigError(f"the Faust engine cannot authenticate with security.protocol={protocol} "
                      f"sasl.mechanism={mechanism}: use the consumer engine (--engine consumer)")
