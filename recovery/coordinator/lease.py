"""Which of a deployment's coordinators acts: the one holding the lease (a consumer group's one
partition), with its epoch, which every command carries (docs/coordinator.md, "The adapter,
restarts and fail-over").
"""

from __future__ import annotations

import json
import logging
import os
import socket
import threading
import time

from confluent_kafka import Consumer

from trainmedic.bus import clients
from trainmedic.bus.admin import ensure_topic
from trainmedic.bus.settings import KafkaSettings
from trainmedic.bus.transactional import TransactionalProducer

log = logging.getLogger("trainmedic.coordinator")

SESSION_TIMEOUT_S = 6.0  # the broker's smallest allowed (group.min.session.timeout.ms): fastest take-over
LEASE_TOPIC_CONFIG = {"cleanup.policy": "delete", "retention.ms": str(30 * 24 * 3600 * 1000)}


def lease_topic(settings: KafkaSettings) -> str:
    return settings.topics.owned("coordinator") + "-lease"


class Lease:
    """This process's membership in the lease group. `acquire` waits for the lease; `held` says
    whether it is still ours (call it at least every few minutes: it also keeps the membership)."""

    def __init__(self, settings: KafkaSettings) -> None:
        self._settings = settings
        self.topic = lease_topic(settings)
        self.holder = f"{socket.gethostname()}:{os.getpid()}"
        self._consumer: Consumer | None = None
        self._held = False

    def acquire(self, stop: threading.Event, *, report_every_s: float = 60.0) -> bool:
        """Wait until this process holds the lease (True) or `stop` is set (False)."""
        consumer = self._join()
        began = time.monotonic()
        report_at = began + 2.0  # a lone coordinator gets the lease within about a second: say nothing
        while not stop.is_set():
            consumer.poll(0.2)  # lease records are not read: the assignment is what counts
            if self._held:
                log.info("lease %s: held by %s after %.1fs", self.topic, self.holder,
                         time.monotonic() - began)
                return True
            if time.monotonic() >= report_at:
                log.info("standby: another coordinator holds the lease %s; waiting (%.0fs so far)",
                         self.topic, time.monotonic() - began)
                report_at += report_every_s
        return False

    def held(self) -> bool:
        if self._consumer is not None:
            self._consumer.poll(0)
        return self._held

    def take(self, producer: TransactionalProducer) -> int:
        """Fence older holders through `producer` and return this holder's epoch."""
        self._ensure_topic()
        producer.init()
        offsets: list[int] = []
        record = json.dumps({"holder": self.holder, "ts": time.time()}).encode()
        with producer.transaction():
            producer.send(self.topic, record, key="lease",
                          on_delivery=lambda err, msg: offsets.append(msg.offset()) if err is None else None)
        if not offsets:
            raise RuntimeError("the lease record was committed without a delivery report")
        return offsets[0]

    def release(self) -> None:
        """Leave the group: a standby takes the lease at once instead of after the session timeout."""
        if self._consumer is not None:
            self._consumer.close()
            self._consumer = None
        self._held = False

    def _join(self) -> Consumer:
        if self._consumer is None:
            self._ensure_topic()
            self._consumer = clients.consumer(self._settings, {
                "group.id": self.topic,
                "session.timeout.ms": int(SESSION_TIMEOUT_S * 1000),
                "heartbeat.interval.ms": 1000,
                "enable.auto.commit": False,
                "auto.offset.reset": "latest",
                # a standby joining must not take the lease from a live holder
                "partition.assignment.strategy": "cooperative-sticky",
                # The lease topic may be a moment old: a member whose metadata lacks it yet is assigned
                # nothing until its next refresh (5 min by default). On a fresh cluster of three brokers
                # a lone coordinator stayed a standby for minutes (tests/multihost/test_brokers.py).
                "topic.metadata.refresh.interval.ms": 1000,
            }, logger=log)
            self._consumer.subscribe([self.topic], on_assign=self._assigned, on_revoke=self._revoked,
                                     on_lost=self._lost)
        return self._consumer

    def _ensure_topic(self) -> None:
        ensure_topic(self._settings, self.topic, partitions=1, config=LEASE_TOPIC_CONFIG)

    # cooperative rebalancing: each callback names only the partitions that move
    def _assigned(self, _consumer: Consumer, partitions: list) -> None:
        self._held = self._held or bool(partitions)

    def _revoked(self, consumer: Consumer, partitions: list) -> None:
        if partitions:
            self._lost(consumer, partitions)

    def _lost(self, _consumer: Consumer, _partitions: list) -> None:
        if self._held:
            log.warning("lease %s: lost", self.topic)
        self._held = False
