"""The coordinator's Kafka adapter: rebuild the state from the log, catch up, then react and tick.

Thin on purpose: every decision is the core's. What this adds is I/O: reading the jobs,
incidents, commands, acks and nodes topics from offset 0, signing and producing what the core
emits (commands keyed by node, lifecycle events by job), and a clock.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable

from bus.message import Record
from bus.producer import EventProducer
from bus.reader import TopicReader
from bus.settings import KafkaSettings
from recovery.coordinator import observe
from recovery.coordinator.config import CoordinatorConfig
from recovery.coordinator.intake import rebuild, receive
from recovery.coordinator.narrate import cause, narrate
from recovery.coordinator.routing import route
from recovery.coordinator.state import ClusterState, JobState
from recovery.coordinator.timers import catch_up, settle, tick
from schemas import DeadLettered
from schemas.commands import Command

log = logging.getLogger("trainmedic.coordinator")

Signer = Callable[[Command], Command]


def valid(items: Iterable[Record | DeadLettered]) -> list[Record]:
    """The valid events; invalid ones are skipped with a warning (the reader dead-letters them)."""
    records = []
    for item in items:
        if isinstance(item, DeadLettered):
            log.warning("invalid event %s[%d]@%d skipped: %s", item.source_topic, item.partition, item.offset,
                        item.reason)
        else:
            records.append(item)
    return records


class CoordinatorService:
    """One active coordinator. `start()` rebuilds and catches up; `step()` handles what arrives.

    A failed delivery raises: the service stops rather than run on a state the log does not
    hold; restarted, it rebuilds from the log and decides again what was lost. A record that
    fails to validate or to apply never stops it: it goes to the dlq (when read live) and the
    service reads on.
    """

    def __init__(self, settings: KafkaSettings, config: CoordinatorConfig, *, sign: Signer,
                 clock: Callable[[], float] = time.time) -> None:
        self.state = ClusterState.initial(config)
        self._topics = settings.topics
        self._sign = sign
        self._clock = clock
        topics, name = self._topics, settings.topics.owned("coordinator")
        self._producer = EventProducer(settings, client_id=name)
        self._reader = TopicReader(settings, [topics.jobs, topics.incidents, topics.commands, topics.acks,
                                              topics.nodes],
                                   validate=True, dlq=self._producer, name=name, timeout_s=30.0)
        self._next_tick = 0.0

    def start(self) -> None:
        """Fold the whole log (jobs first: every other event names a job), then catch up."""
        records = valid(item for batch in self._reader.batches(give_up_s=60.0) for item in batch)
        records.sort(key=lambda r: r.topic != self._topics.jobs)
        for record, reason in rebuild(self.state, records):  # dead-lettered when first read live
            log.warning("%s[%d]@%d skipped: %s", record.topic, record.partition, record.offset, reason)
        jobs = self.state.jobs.values()
        log.info("rebuilt from %d events: %d jobs (%d running), %d incidents, %d commands, %d nodes isolated",
                 len(records), len(jobs), sum(j.state is JobState.RUNNING for j in jobs),
                 len(self.state.incidents), len(self.state.commands),
                 sum(not n.healthy for n in self.state.nodes.values()))
        now = self._clock()
        self._publish("catch-up after start", catch_up(self.state, now))
        self._next_tick = now + self.state.config.tick_s

    def step(self, timeout_s: float = 1.0) -> None:
        """Handle the events that arrive within `timeout_s` (less if a tick is due), then tick."""
        wait = max(0.0, min(timeout_s, self._next_tick - self._clock()))
        for record in valid(self._reader.poll(wait)):
            observe.received(record.event)
            outputs = receive(self.state, record, self._clock())
            if isinstance(outputs, str):
                self._producer.send(self._topics.dlq, record.rejected(outputs, self._clock()),
                                    key=record.topic)
                continue
            self._publish(cause(record.event), outputs)
        now = self._clock()
        if now >= self._next_tick:
            self._publish("deadline", settle(self.state, tick(self.state, now), now))
            observe.cluster(self.state)
            self._next_tick = now + self.state.config.tick_s

    def run(self, stop: threading.Event) -> None:
        self.start()
        while not stop.is_set():
            self.step()

    def _publish(self, trigger: str, outputs: list) -> None:
        if not outputs:
            return
        for line in narrate(trigger, outputs):
            log.info("%s", line)
        observe.published(self.state, outputs)
        for event in outputs:
            suffix, key = route(event)
            if isinstance(event, Command):
                event = self._sign(event)
            self._producer.send(self._topics.name(suffix), event, key=key)
        self._producer.flush()

    def close(self) -> None:
        self._reader.close()
        self._producer.close()
