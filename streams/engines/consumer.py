"""The detector's default engine: one plain Kafka consumer loop around `Pipeline`, reading every
telemetry partition and checkpointing state with its offsets (docs/streams.md, "Two engines, one
pipeline", "State: one checkpoint, both engines, with its offsets").
"""

from __future__ import annotations

import gc
import logging
import time
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass

from confluent_kafka import KafkaError as RdKafkaError
from confluent_kafka import KafkaException, TopicPartition

from trainmedic.bus import clients
from trainmedic.bus.admin import wait_for_topics
from trainmedic.bus.message import RawMessage
from trainmedic.bus.producer import EventProducer
from trainmedic.bus.reader import At, fetch, locate, watermarks
from trainmedic.bus.settings import KafkaSettings
from trainmedic.common.errors import KafkaError
from trainmedic.streams import metrics, read_check
from trainmedic.streams.checkpoints.contents import Cadence, Offsets, encode_checkpoint
from trainmedic.streams.checkpoints.topic import CheckpointTopic
from trainmedic.streams.engines.backpressure import to_pause, unread_waits
from trainmedic.streams.pipeline import Output, Pipeline
from trainmedic.streams.read_check import ReadCheck

log = logging.getLogger(__name__)

COMMIT_EVERY_S = 1.0
FLUSH_WAIT_S = 5.0  # how long a checkpoint waits for the incidents before it to be acknowledged
WARN_EVERY_S = 30.0  # the same consumer error is logged at most this often
BLIND_WARN_S = 5.0  # reads unconfirmed for longer than this are logged (at most every WARN_EVERY_S)

# How the detector's consumer fetches: a partition it reads again after a pause (`_backpressure`)
# waits for its next fetch. fetch.wait.max.ms, how long the broker may hold a fetch for data
# (librdkafka's default 500 ms): an 18 s backlog drained in 6.8-8.4 s at 500, in 5.5-6.3 at 20.
# fetch.queue.backoff.ms, how long librdkafka puts off fetching a partition once its queue was full
# (default 1,000 ms, which a backlog's is): the detector waited whole ticks for a partition read
# again, 1.3-2.7 s of a 4.7-6.5 s drain; at 20 ms it waits 0.4-0.45 s of 3.4-3.8 (ad hoc, three
# drains each; docs/streams.md, "Reading a backlog").
READING = {"fetch.wait.max.ms": 20, "fetch.queue.backoff.ms": 20}

# Python's default (700 allocations) runs a collection every few hundred events over the
# detector's hundreds of thousands of objects; these drain markedly more (docs/streams.md has the rates).
GC_THRESHOLDS = (100_000, 50, 100)

# Where to start a partition no checkpoint covers: "earliest", "latest" or Unix seconds.
Start = str | float


class Warnings:
    """Logs each kind of warning at most every WARN_EVERY_S; a fatal consumer error is raised."""

    def __init__(self, logger: logging.Logger) -> None:
        self._log = logger
        self._at: dict[str, float] = {}

    def __call__(self, kind: str, message: str) -> None:
        now = time.monotonic()
        if now - self._at.get(kind, float("-inf")) >= WARN_EVERY_S:
            self._at[kind] = now
            self._log.warning(message)

    def consumer_error(self, err: RdKafkaError) -> None:
        if err.fatal():
            raise KafkaError(f"consumer failed: {err.str()}", code=err.name())
        self(err.name(), f"consumer: {err.str()} (retrying)")


def tune_gc() -> None:
    """For a process that runs the detector: collect garbage cycles less often (its events make
    no cycles; reference counting frees them)."""
    gc.set_threshold(*GC_THRESHOLDS)


# How often the loop ticks when nothing arrives, and asks for the end offsets: reads confirmed complete
# move event time on, so a failure's last report waits for them (docs/streams.md, "Event time from
# Kafka"). At 0.25 s each, with news waiting for the next tick, an exit's incident was on Kafka
# 0.96-1.12 s after the exit; at 0.1 s, ticking on news, 0.66-0.69 s (bench/detection_delay.py --live,
# medians of 5 and 7).
TICK_S = 0.1


@dataclass(frozen=True)
class ServiceConfig:
    app_id: str  # consumer group and stem of its own topics; the CLI's default is `<prefix>detector`
    start: Start = "latest"
    tick_s: float = TICK_S
    checkpoint_every_s: float = 1.0
    batch: int = 2000
    report_every_s: float = 60.0
    partitions_every_s: float = 30.0  # how often to look for partitions added to the telemetry topics
    read_check_every_s: float = TICK_S  # how often to ask for the end offsets
    read_check_timeout_s: float = read_check.TIMEOUT_S


class DetectorService:
    """`run()` until `stopping()` says so; then a last checkpoint and a clean close."""

    REWINDS = True  # its offsets are the telemetry partitions': events waiting are read again after a restart

    def __init__(self, settings: KafkaSettings, pipeline: Pipeline, config: ServiceConfig) -> None:
        self.settings, self.pipeline, self.config = settings, pipeline, config
        self.offsets: Offsets = {}  # next offset to read, per telemetry partition
        self._cadence = Cadence(config.checkpoint_every_s)
        self._warn = Warnings(log)
        self._consumer = clients.consumer(settings, {
            "group.id": config.app_id, "enable.auto.commit": False, "enable.partition.eof": False,
            "auto.offset.reset": "earliest",  # an offset retention removed: lose no more than it did
            **READING,
        }, logger=log)
        self._out = EventProducer(settings, client_id=f"{config.app_id}-out")
        self._checkpoints = CheckpointTopic(settings, config.app_id)
        self._reads = ReadCheck(settings, config.read_check_every_s, config.read_check_timeout_s)
        self._paused: frozenset = frozenset()  # input partitions not read now (`_backpressure`)
        self._paused_sources: frozenset = frozenset()  # the telemetry partitions that leaves unread

    def run(self, stopping: Callable[[], bool]) -> None:
        with ExitStack() as closing:
            closing.callback(self._checkpoints.close)
            closing.callback(self._out.close)
            closing.callback(self._consumer.close)
            try:
                self._start()
                self._loop(stopping)
                if not self._checkpoint(time.monotonic(), force=True):
                    log.warning("the last checkpoint could not be written: a restart resumes from the one "
                                "before, and decides again what came after it")
            except KafkaException as err:  # e.g. a metadata request that timed out
                raise KafkaError(f"detector: {err.args[0].str()}", code=err.args[0].name()) from None

    def _start(self) -> None:
        saved = self._checkpoints.read_last()
        partitions = self._partitions()
        fresh = [tp for tp in partitions if saved is None or tp not in saved.offsets]
        # With a checkpoint, a partition it does not know was added since: all of it is unread.
        start = self._first_start() if saved is None else "earliest"
        if saved is not None:  # inside what each partition holds now (retention may have removed some)
            known = [tp for tp in partitions if tp not in fresh]
            self.offsets = self._start_offsets(known, {tp: saved.offsets[tp] for tp in known})
        self.offsets.update(self._start_offsets(fresh, start))
        if saved is not None:  # last, so that the start-up itself does not count as quiet
            saved.restore(self.pipeline.live, time.time())
            log.info("detector state restored from %s (event time %.3f, %d events held)",
                     self._checkpoints.topic, saved.state.clock, len(saved.held))
            self._resumed(saved.offsets)
        self._expect_start()
        self.pipeline.live.watch_reads()
        self._consumer.assign([TopicPartition(t, p, o) for (t, p), o in self.offsets.items()])
        log.info("detector ready: reading %d partitions of %d topics (%d from the checkpoint, %d from %r)",
                 len(partitions), len(self.input_topics()), len(partitions) - len(fresh), len(fresh), start)

    def _first_start(self) -> Start:
        """Where input partitions begin with no checkpoint."""
        return self.config.start

    def _resumed(self, saved: Offsets) -> None:
        """After a checkpoint's state is restored, with its offsets (the input's are taken already)."""

    def _expect_start(self) -> None:
        """At start: hold event time back for the telemetry partitions with a backlog."""
        self._expect_backlog(self.offsets)

    def _expect_backlog(self, offsets: Offsets) -> None:
        """Partitions with messages before their end hold event time back until they deliver."""
        marks = watermarks(self._consumer, list(offsets), timeout_s=10)
        behind = [tp for tp, offset in offsets.items() if offset < marks[tp][1]]
        self.pipeline.live.expect(behind, time.time())

    def _expect_new(self, offsets: Offsets) -> None:
        """Partitions added while it runs: read from their beginning, so hold event time back."""
        self._expect_backlog(offsets)

    def _partitions(self) -> list[tuple[str, int]]:
        """The partitions it reads."""
        counts = wait_for_topics(self.settings, self.input_topics())
        return [(name, p) for name, count in counts.items() for p in range(count)]

    def _start_offsets(self, partitions: list[tuple[str, int]], start: Start | Offsets) -> Offsets:
        """Explicit offsets (not logical ones), so that 'ready' means nothing later is missed;
        saved ones kept inside what each partition holds, with a warning where they are gone."""
        return locate(self._consumer, partitions, At(start) if isinstance(start, float | int) else start,
                      timeout_s=10)

    def _loop(self, stopping: Callable[[], bool]) -> None:
        pipeline, config, send = self.pipeline, self.config, self._send
        last_tick = last_commit = last_report = last_scan = time.monotonic()
        reported, pause_at = 0, pipeline.live.config.pause_at
        while not stopping():
            messages = fetch(self._consumer, config.tick_s, config.batch)
            wall = time.time()
            if messages:
                send(self._take(messages, wall))
            now = time.monotonic()
            if self._paused or pipeline.live.buffered >= pause_at:
                self._backpressure(wall)
            if self._poll_reads(wall) or now - last_tick >= config.tick_s:  # news moves event time on
                send(pipeline.on_tick(wall))
                last_tick = now
            self._out.client.poll(0)
            self._checkpoints.poll()  # a checkpoint is not waited for: the last one holds
            self._checkpoint(now)
            if now - last_commit >= COMMIT_EVERY_S:
                self._commit()
                last_commit = now
            if now - last_scan >= config.partitions_every_s:
                self._add_new_partitions()
                last_scan = now
            if now - last_report >= config.report_every_s:
                stats = pipeline.stats
                log.info("%d events in the last %.0f s (%.0f/s), %d incidents and %d dead letters in all; "
                         "holding %d, event time %.3f", stats.events - reported, now - last_report,
                         (stats.events - reported) / (now - last_report), stats.incidents,
                         stats.dead_lettered, pipeline.live.buffered, pipeline.live.detector.state.clock)
                reported, last_report = stats.events, now
            blind = pipeline.live.blind_for
            if blind is not None and blind > BLIND_WARN_S:
                self._warn("blind", ("reads not yet known complete" if blind == float("inf") else
                                     f"reads not known complete for {blind:.0f} s")
                           + " (broker unreachable or slow, or a backlog): event time waits for the data"
                           + (f"; last end-offset request: {self._reads.error}" if self._reads.error else ""))

    def _read(self, messages: list) -> list[RawMessage]:
        """A fetch's messages, consumer errors left out (logged, or raised if fatal); `offsets` moves
        past them."""
        offsets, read = self.offsets, []
        for msg in messages:
            err = msg.error()
            if err is not None:
                self._warn.consumer_error(err)
                continue
            message = RawMessage.of(msg)
            offsets[(message.topic, message.partition)] = message.offset + 1
            read.append(message)
        return read

    def _take(self, messages: list, wall: float) -> list[Output]:
        """A fetch's messages, as confluent_kafka gives them: what to send; `offsets` moves past them."""
        return self.pipeline.on_fetch(messages, wall, self.offsets, self._warn.consumer_error)

    def _backpressure(self, wall: float) -> None:
        """Too many events held and waiting: stop reading the partitions whose events wait, each until
        they are fed (streams/engines/backpressure.py)."""
        live = self.pipeline.live
        routes = self._routes()
        pause = to_pause(live.waiting(), live.buffered, self._paused_sources, live.config.pause_at,
                         len(routes))
        reading = {routes[source] for source in routes if source not in pause}
        paused = frozenset(routes[source] for source in pause if source in routes) - reading
        if paused == self._paused:
            return
        try:
            if self._paused - paused:
                self._consumer.resume([TopicPartition(t, p) for t, p in self._paused - paused])
            if paused - self._paused:
                self._consumer.pause([TopicPartition(t, p) for t, p in paused - self._paused])
        except KafkaException as err:
            self._warn("pause", f"could not pause or resume partitions: {err.args[0].str()} (retrying)")
            return
        if not self._paused:
            log.info("holding %d events: not reading the %d of %d partitions ahead in event time until "
                     "the others catch up", live.buffered, len(paused), len(self.offsets))
        elif not paused:
            log.info("reading every partition again (holding %d events)", live.buffered)
        self._paused = paused
        self._paused_sources = frozenset(source for source, tp in routes.items() if tp in paused)
        metrics.PAUSED_PARTITIONS.set(len(paused))

    def _routes(self) -> dict[tuple[str, int], tuple[str, int]]:
        """Per telemetry partition, the partition it is read from."""
        return {tp: tp for tp in self.offsets}

    def _poll_reads(self, wall: float) -> bool:
        """Whether everything is read (`ReadCheck`); whether that is news. Paused partitions are asked
        about, but only the others' reads are checked. Reads confirmed for them are complete if every
        partition left out has events waiting (those hold event time back whatever is unread behind
        them; with every partition so paused, complete now); else they say only that the partitions
        confirmed can be found quiet (`LiveDetector.read_through`)."""
        offsets, paused, live = self.read_offsets(), self._paused_sources, self.pipeline.live
        reading = {tp: offset for tp, offset in offsets.items() if tp not in paused} if paused else offsets
        complete = self._reads.poll(reading, wall, about=offsets)
        if not reading:  # every partition paused: nothing is confirmed
            if paused and unread_waits(offsets, paused, live.waiting()):
                live.caught_up(wall)  # else a blind spell, and what waits is never fed: a deadlock
            return False
        if complete is None:
            return False
        if unread_waits(offsets, paused, live.waiting()):
            live.caught_up(complete)
        else:
            live.read_through(complete, frozenset(reading))
        return True

    def read_offsets(self) -> Offsets:
        """The telemetry partitions' next offsets, for `ReadCheck`."""
        return self.offsets

    def saved_offsets(self) -> Offsets:
        """What a checkpoint keeps of where reading stands."""
        return self.offsets

    def input_topics(self) -> list[str]:
        topics = self.settings.topics
        return [topics.gpu, topics.node, topics.worker]

    def _send(self, outs: list[Output]) -> None:
        for out in outs:
            self._out.send(out.topic, out.value, key=out.key)

    def _add_new_partitions(self) -> None:
        """Partitions added to a telemetry topic while it runs: read from their beginning."""
        try:  # the consumer's own metadata: it must know a partition before it can read it
            meta = self._consumer.list_topics(timeout=10).topics
            new = [(name, p) for name in self.input_topics() if name in meta
                   for p in meta[name].partitions if (name, p) not in self.offsets]
            start = self._start_offsets(new, "earliest")
            self._expect_new(start)
        except KafkaException as err:
            self._warn("partitions", f"could not look for new partitions: {err.args[0].str()} (retrying)")
            return
        if new:
            self.offsets.update(start)
            self._consumer.incremental_assign([TopicPartition(t, p, o) for (t, p), o in start.items()])
            log.info("reading %d partitions added since the start: %s", len(new),
                     ", ".join(f"{t}[{p}]" for t, p in new))

    def _checkpoint(self, now: float, force: bool = False) -> bool:
        """Write one if due (or `force`d); whether one was written."""
        live = self.pipeline.live
        clock = live.detector.state.clock
        if not force and not self._cadence.due(clock, now):
            return False
        began = time.monotonic()
        # Every incident the checkpoint has decided is delivered before it; a delivery the producer
        # gave up on is raised (the incident would be lost), one still in flight postpones.
        unsent = self._out.client.flush(FLUSH_WAIT_S)
        self._out.raise_failures()
        if unsent:
            self._cadence.postponed(now)
            self._warn("flush", f"checkpoint postponed: {unsent} incidents or dead letters not yet "
                       f"acknowledged after {FLUSH_WAIT_S:.0f} s (is the broker up?)")
            return False
        try:
            saved = encode_checkpoint(live, self.saved_offsets(), time.time(), self._checkpoints.owner,
                                      rewind=self.REWINDS)
        except (OverflowError, TypeError, ValueError) as err:  # a value msgpack cannot hold (an int past
            self._cadence.postponed(now)  # 64 bits): only input no validator passed; keep detecting
            self._warn("encode", f"checkpoint not written: the state holds what cannot be saved ({err})")
            return False
        self._checkpoints.write(saved)
        self._cadence.saved(clock, now, time.monotonic() - began)
        return True

    def _commit(self) -> None:
        if not self.offsets:
            return
        try:
            self._consumer.commit(offsets=[TopicPartition(t, p, o) for (t, p), o in self.offsets.items()],
                                  asynchronous=True)
        except KafkaException as err:  # only lag monitoring reads these
            self._warn("commit", f"offsets not committed: {err.args[0].str()}")
