"""The ingest stage of a sharded detector (`trainmedic detector --stage ingest`), N instances: validate
telemetry, dead-letter what is invalid, and send the rest as batches to `<app-id>-events`, exactly
once (docs/streams.md, "Detection for a large cluster: a sharded detector").
"""

from __future__ import annotations

import contextlib
import logging
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass

import msgspec
from confluent_kafka import OFFSET_STORED, KafkaException, TopicPartition

from trainmedic.bus import clients
from trainmedic.bus.admin import ensure_topic, wait_for_topics
from trainmedic.bus.message import RawMessage
from trainmedic.bus.reader import At, fetch, locate
from trainmedic.bus.settings import KafkaSettings
from trainmedic.bus.transactional import Fenced, TransactionalProducer
from trainmedic.common.errors import KafkaError
from trainmedic.schemas import encode
from trainmedic.schemas.wire import KINDS, Telemetry
from trainmedic.streams.engines.batches import (
    EVENTS_PARTITIONS,
    EVENTS_TOPIC_CONFIG,
    MAX_BATCH_BYTES,
    MAX_EVENTS,
    MAX_MESSAGE_BYTES,
    Batch,
    Entry,
    encode_batch,
    events_partition,
    events_topic,
)
from trainmedic.streams.engines.consumer import Start, Warnings
from trainmedic.streams.pipeline import Output, Pipeline

log = logging.getLogger(__name__)

Where = tuple[str, int]
ANNOUNCE_EVERY_S = 10.0  # a partition with no news tells the decider where it stands this often
TXN_CALL_TIMEOUT_S = 4.0  # how long one transactional call may block the loop (4 in a row fit a transaction)
RESTART_WAIT_S = 10.0  # after a rewind or an assignment: how long a message past the restart offset is stale
FENCED_IN_A_ROW = 3  # fenced this often with a new producer each time: another instance has its id
RETRY_MAX_S = 10.0  # the longest pause between failed transactions
_to_wire = msgspec.json.Decoder(Telemetry)


@dataclass(frozen=True)
class IngestConfig:
    app_id: str
    start: Start = "latest"  # where a partition the group has no offset for begins
    instance: str = socket.gethostname()  # names its transactions: one per instance, stable across restarts
    events_partitions: int = EVENTS_PARTITIONS  # if it creates the events topic
    flush_every_s: float = 0.05  # one transaction per this much wall time (the decider's added latency)
    batch: int = 2000
    session_timeout_s: float = 10.0  # a dead instance's partitions move after this
    transaction_timeout_s: float = 20.0  # how long a dead instance's open transaction can hold the decider
    report_every_s: float = 60.0


def wire_event(event: object) -> object:
    """The event as a Struct (schemas/wire.py), whichever kind validated it: batches carry Structs."""
    return event if isinstance(event, KINDS) else _to_wire.decode(encode(event))


class IngestService:
    """`run()` until `stopping()` says so; then a last transaction and a clean leave of the group."""

    def __init__(self, settings: KafkaSettings, pipeline: Pipeline, config: IngestConfig) -> None:
        self.settings, self.pipeline, self.config = settings, pipeline, config
        self.topic = events_topic(config.app_id)
        self.forwarded = 0
        self._partitions = config.events_partitions
        self._first: dict[Where, int] = {}  # per assigned partition: the first offset not yet committed
        self._next: dict[Where, int] = {}  # ... and the next offset to read
        self._pending: dict[Where, list[Entry]] = {}
        self._dead: dict[Where, list[Output]] = {}  # ... its dead letters since the last transaction
        self._announced: dict[Where, float] = {}  # ... when a batch last told the decider where it stands
        self._restart: dict[Where, float] = {}  # assigned or rewound (when): the next message is at `_next`
        self._fenced = 0  # transactions fenced in a row
        self._closing = False  # leaving after an error: no transaction while the group takes the partitions
        self._failed = 0  # transactions failed in a row
        self._at_start: set[Where] = set()  # the telemetry partitions when it started
        self._fresh_group = True  # ... none of which had offsets in the group
        self._warn = Warnings(log)
        self._consumer = clients.consumer(settings, {
            "group.id": f"{config.app_id}-ingest", "enable.auto.commit": False,
            "enable.partition.eof": False, "auto.offset.reset": "earliest",
            "partition.assignment.strategy": "cooperative-sticky",
            "session.timeout.ms": int(config.session_timeout_s * 1000),
            "heartbeat.interval.ms": int(config.session_timeout_s * 1000 / 5),
            "topic.metadata.refresh.interval.ms": 30_000,  # partitions added to telemetry: read within this
        }, logger=log)
        self._out: TransactionalProducer | None = None  # made (and registered) when a transaction needs one
        self._retry_at = float("-inf")  # after a failed transaction: no other before this (monotonic)

    def run(self, stopping: Callable[[], bool]) -> None:
        topics = self.settings.topics
        ensure_topic(self.settings, self.topic, partitions=self.config.events_partitions,
                     config=EVENTS_TOPIC_CONFIG)
        self._partitions = wait_for_topics(self.settings, [self.topic])[self.topic]
        self._producer()
        counts = wait_for_topics(self.settings, [topics.gpu, topics.node, topics.worker])
        self._at_start = {(name, p) for name, count in counts.items() for p in range(count)}
        try:
            committed = self._consumer.committed([TopicPartition(*where) for where in self._at_start],
                                                 timeout=30)
            self._fresh_group = all(tp.offset < 0 for tp in committed)
            self._consumer.subscribe([topics.gpu, topics.node, topics.worker], on_assign=self._assigned,
                                     on_revoke=self._revoked, on_lost=self._lost)
            log.info("ingest %s ready: group %s-ingest, batches to %s (%d partitions)", self.config.instance,
                     self.config.app_id, self.topic, self._partitions)
            self._loop(stopping)
            self._flush()
        except KafkaException as err:
            self._closing = True
            raise KafkaError(f"ingest: {err.args[0].str()}", code=err.args[0].name()) from None
        except BaseException:
            self._closing = True
            raise
        finally:
            try:
                self._consumer.close()  # leaves the group: its partitions move now, not after the session
            finally:
                if self._out is not None:
                    with contextlib.suppress(KafkaException):  # in a fatal state: nothing to deliver
                        self._out.close(TXN_CALL_TIMEOUT_S)

    def _loop(self, stopping: Callable[[], bool]) -> None:
        config, check, pending, nexts = self.config, self.pipeline.check, self._pending, self._next
        last_flush = last_report = time.monotonic()
        reported = 0
        while not stopping():
            messages = fetch(self._consumer, config.flush_every_s, config.batch)
            wall = time.time()
            for msg in messages:
                if msg.error():
                    self._warn.consumer_error(msg.error())
                    continue
                where = (msg.topic(), msg.partition())
                expected = nexts.get(where)
                # Revoked since it was fetched, or fetched before a rewind or a new assignment: what
                # follows a rewind or an assignment begins where it says (or, RESTART_WAIT_S later,
                # past messages that retention removed meanwhile).
                if expected is None:
                    continue
                if expected < 0:  # assigned at the group's offset as the consumer found it: here
                    expected = self._first[where] = msg.offset()
                if msg.offset() < expected:
                    continue
                if where in self._restart:
                    if msg.offset() != expected:
                        if time.monotonic() - self._restart[where] < RESTART_WAIT_S:
                            continue
                        log.warning("%s[%d]: offsets %d to %d are gone (retention?): going on from %d",
                                    *where, expected, msg.offset() - 1, msg.offset())
                    del self._restart[where]
                event, message, dead = check(RawMessage.of(msg), wall, msg.headers())
                if dead:
                    self._dead[where] += dead
                if event is not None:
                    pending[where].append(Entry(message.offset, message.timestamp_ms, message.key,
                                                wire_event(event)))
                nexts[where] = message.offset + 1
            now = time.monotonic()
            if now - last_flush >= config.flush_every_s:
                self._flush()
                last_flush = now
            if now - last_report >= config.report_every_s:
                log.info("%d events forwarded in the last %.0f s (%.0f/s), %d dead letters in all; "
                         "%d partitions", self.forwarded - reported, now - last_report,
                         (self.forwarded - reported) / (now - last_report), self.pipeline.stats.dead_lettered,
                         len(nexts))
                reported, last_report = self.forwarded, now

    def _flush(self) -> None:
        """One transaction: the batches read since the last, the dead letters, the group's offsets.
        A partition with nothing new is announced again every ANNOUNCE_EVERY_S (where it stands), so
        that a decider starting afresh learns it without waiting for its next message."""
        now = time.monotonic()
        due = now - ANNOUNCE_EVERY_S
        moved = [where for where, offset in self._next.items() if offset >= 0 and (  # < 0: not read yet
                 offset != self._first[where] or self._announced.get(where, float("-inf")) <= due)]
        if not moved or now < self._retry_at:
            return
        out = self._producer()
        try:
            if out is None:
                raise KafkaError("no transactional producer: the broker did not register it")
            with out.transaction():
                for where in moved:
                    self._send(where)
                    for letter in self._dead[where]:
                        out.send(letter.topic, letter.value, key=letter.key)
                out.client.send_offsets_to_transaction(
                    [TopicPartition(t, p, self._next[(t, p)]) for t, p in moved],
                    self._consumer.consumer_group_metadata(), TXN_CALL_TIMEOUT_S)
        except (KafkaError, KafkaException, BufferError) as err:
            # A broker away, slow or restarted can leave the producer in a state no abort mends, or
            # fenced (the broker aborted a transaction that outlived its timeout): a new one
            # (registering aborts what this one left open), what it held read again, after a pause
            # that doubles while it fails. Fenced with a new producer each time: another instance
            # registers the same id.
            self._fenced = self._fenced + 1 if isinstance(err, Fenced) else 0
            if self._fenced >= FENCED_IN_A_ROW:
                raise KafkaError(f"{err} (another ingest instance uses the id {self.config.instance!r}: "
                                 "give each its own --instance)") from None
            self._failed += 1
            self._retry_at = now + min(RETRY_MAX_S, 0.1 * 2 ** self._failed)
            self._warn("flush", f"transaction failed ({self._failed} in a row): {err}; reading again "
                       "from the last commit with a new producer")
            self._rewind()
            self._discard_producer()
            return
        self._failed = self._fenced = 0
        for where in moved:
            self.forwarded += len(self._pending[where])
            self._pending[where], self._dead[where] = [], []
            self._first[where] = self._next[where]
            self._announced[where] = now

    def _send(self, where: Where) -> None:
        """The partition's events since the last transaction, in batches of MAX_EVENTS at most."""
        partition = events_partition(where, self._partitions)
        key = f"{where[0]}:{where[1]}".encode()
        entries, start, last = self._pending[where], self._first[where], self._next[where]
        for i in range(0, max(len(entries), 1), MAX_EVENTS):
            chunk = entries[i:i + MAX_EVENTS]
            end = last if i + MAX_EVENTS >= len(entries) else chunk[-1].offset + 1
            for data in _encoded(where, start, end, chunk):
                self._out.client.produce(self.topic, data, key=key, partition=partition)
            start = end

    def _producer(self) -> TransactionalProducer | None:
        """The transactional producer, made and registered if there is none; None if the broker does
        not answer (tried again at the next transaction). Registering fences an older one of this id."""
        if self._out is None:
            out = TransactionalProducer(
                self.settings, transactional_id=f"{self.config.app_id}-ingest-{self.config.instance}",
                timeout_s=TXN_CALL_TIMEOUT_S, transaction_timeout_s=self.config.transaction_timeout_s,
                linger_ms=5, config={"message.max.bytes": MAX_MESSAGE_BYTES})
            try:
                out.init()
            except KafkaError as err:
                self._warn("init", f"cannot register the transactional producer: {err} (retrying)")
                _drop(out)
                return None
            self._out = out
        return self._out

    def _discard_producer(self) -> None:
        out, self._out = self._out, None
        if out is not None:
            _drop(out)

    def _rewind(self) -> None:
        """After an aborted transaction: read again what it held, from where it began."""
        now = time.monotonic()
        for where, offset in self._first.items():
            self._next[where] = offset
            self._pending[where], self._dead[where] = [], []
            self._restart[where] = now
            try:
                self._consumer.seek(TopicPartition(*where, offset))
            except KafkaException:  # a partition assigned a moment ago cannot be sought yet
                self._consumer.incremental_unassign([TopicPartition(*where)])
                self._consumer.incremental_assign([TopicPartition(*where, offset)])

    # -- the group ---------------------------------------------------------------------

    def _assigned(self, consumer, partitions: list[TopicPartition]) -> None:
        """Given partitions: from the group's committed offsets, or `start` for those with none. Each
        is announced to the decider (an empty batch at its start) at the next flush."""
        try:
            offsets, how = self._start_offsets(consumer, partitions)
        except KafkaException as err:
            # The broker does not answer now: the consumer takes the group's offsets itself (the
            # earliest where there are none; the decider skips what it has applied already).
            offsets = {(tp.topic, tp.partition): OFFSET_STORED for tp in partitions}
            how = f"the group's offsets as the consumer finds them ({err.args[0].str()})"
        now = time.monotonic()
        for where, offset in offsets.items():
            self._first[where] = self._next[where] = offset
            self._pending[where], self._dead[where] = [], []
            self._announced.pop(where, None)
            self._restart[where] = now
        consumer.incremental_assign([TopicPartition(t, p, o) for (t, p), o in offsets.items()])
        log.info("assigned %d partitions (%s): %s", len(offsets), how, _names(offsets))

    def _start_offsets(self, consumer, partitions: list[TopicPartition]) -> tuple[dict[Where, int], str]:
        committed = consumer.committed(partitions, timeout=TXN_CALL_TIMEOUT_S)
        saved = {(tp.topic, tp.partition): tp.offset for tp in committed if tp.offset >= 0}
        offsets = locate(consumer, list(saved), saved, timeout_s=TXN_CALL_TIMEOUT_S)  # inside what each holds
        fresh = [(tp.topic, tp.partition) for tp in committed if tp.offset < 0]
        # `start` on the group's first start; a partition added to a topic since is read whole.
        first = [where for where in fresh if self._fresh_group and where in self._at_start]
        start = self.config.start
        added = [where for where in fresh if where not in first]
        offsets |= locate(consumer, first, At(start) if isinstance(start, float | int) else start,
                          timeout_s=TXN_CALL_TIMEOUT_S)
        offsets |= locate(consumer, added, "earliest", timeout_s=TXN_CALL_TIMEOUT_S)
        return offsets, (f"{len(saved)} from the group's offsets, {len(first)} from {start!r}, "
                         f"{len(added)} added since: from the earliest")

    def _revoked(self, consumer, partitions: list[TopicPartition]) -> None:
        """Handing partitions over: commit what was read of them first, so the next owner goes on
        from there."""
        if not self._closing:
            self._flush()
        self._forget(partitions)
        consumer.incremental_unassign(partitions)  # explicitly: a rewind in the flush may have assigned them
        log.info("revoked %d partitions: %s", len(partitions),
                 _names([(tp.topic, tp.partition) for tp in partitions]))

    def _lost(self, consumer, partitions: list[TopicPartition]) -> None:
        """The group gave them away already (this instance missed its session): what was read of them
        and not committed is the next owner's to read again."""
        self._forget(partitions)
        log.warning("lost %d partitions to the group (session timed out): %s", len(partitions),
                    _names([(tp.topic, tp.partition) for tp in partitions]))

    def _forget(self, partitions: list[TopicPartition]) -> None:
        for tp in partitions:
            where = (tp.topic, tp.partition)
            for table in (self._first, self._next, self._pending, self._dead, self._announced):
                table.pop(where, None)
            self._restart.pop(where, None)


def _drop(out: TransactionalProducer) -> None:
    """Let go of a producer: what it queued is read again and sent by the next one. Serving the
    purged messages' reports frees what holds on to it; one in a fatal state raises on either."""
    with contextlib.suppress(KafkaException):
        out.client.purge()
        out.client.flush(0)


def _names(parts) -> str:
    return ", ".join(f"{t}[{p}]" for t, p in sorted(parts))


def _encoded(where: Where, first: int, next_: int, entries: list[Entry]) -> list[bytes]:
    """The batch of these entries, split in halves until each is under MAX_BATCH_BYTES (an event may
    carry a traceback of 1 MB)."""
    data = encode_batch(Batch(*where, first, next_, entries))
    if len(data) <= MAX_BATCH_BYTES or len(entries) < 2:
        return [data]
    half = len(entries) // 2
    middle = entries[half].offset
    return _encoded(where, first, middle, entries[:half]) + _encoded(where, middle, next_, entries[half:])
