"""The coordinator's Kafka adapter: rebuild the state from the log, catch up, then react and tick, only
while it holds the lease; thin on purpose, every decision is the core's (docs/coordinator.md, "The
adapter, restarts and fail-over").
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable, Iterable

from trainmedic.bus.message import Record
from trainmedic.bus.metrics import DEAD_LETTERS
from trainmedic.bus.producer import EventProducer
from trainmedic.bus.reader import TopicReader
from trainmedic.bus.settings import KafkaSettings
from trainmedic.bus.transactional import Fenced, TransactionalProducer
from trainmedic.common.errors import KafkaError
from trainmedic.recovery.coordinator import metrics, observe
from trainmedic.recovery.coordinator.core.config import CoordinatorConfig
from trainmedic.recovery.coordinator.core.endings import rejected, resolutions, unanswered
from trainmedic.recovery.coordinator.core.fold import apply
from trainmedic.recovery.coordinator.core.isolation import group_due
from trainmedic.recovery.coordinator.core.state import ClusterState, JobState
from trainmedic.recovery.coordinator.core.steps import catch_up, settle, tick
from trainmedic.recovery.coordinator.intake import arrival, rebuild, receive
from trainmedic.recovery.coordinator.lease import Lease
from trainmedic.recovery.coordinator.narrate import cause, membership, narrate
from trainmedic.recovery.coordinator.provenance import (
    Trust,
    impersonates,
    members_first,
    skewed,
    stale,
    unverified,
)
from trainmedic.recovery.coordinator.routing import route
from trainmedic.recovery.signing import Signable
from trainmedic.schemas import DeadLettered, Topics
from trainmedic.schemas.commands import Command, CommandAction, NodeKeyRotated, NodeRegistered, Placement
from trainmedic.schemas.nodes import NodeEnrolled, NodeRemoved
from trainmedic.schemas.topics import misplaced

log = logging.getLogger("trainmedic.coordinator")

Signer = Callable[[Signable], Signable]  # a record, signed (`SigningKey.sign`); as it was when insecure
Trusted = Trust | Callable[[], Trust] | None  # a callable: the keys as they are now (KeyFolder)
# records that change which node keys count
MEMBERSHIP = (NodeEnrolled, NodeRemoved, NodeRegistered, NodeKeyRotated)


def read_topics(topics: Topics) -> list[str]:
    """What the coordinator folds (and a CLI folds as it does): others' topics and its own."""
    return [topics.jobs, topics.incidents, topics.recovery, topics.commands, topics.acks, topics.nodes]


def valid(items: Iterable[Record | DeadLettered],
          refused: Callable[[DeadLettered], None] | None = None) -> list[Record]:
    """The valid events; invalid ones are skipped with a warning (the reader dead-letters them),
    and passed to `refused` if given."""
    records = []
    for item in items:
        if isinstance(item, DeadLettered):
            log.warning("invalid event %s[%d]@%d skipped: %s", item.source_topic, item.partition, item.offset,
                        item.reason)
            if refused is not None:
                refused(item)
        else:
            records.append(item)
    return records


class CoordinatorService:
    """The active coordinator at `epoch`. `start()` rebuilds and catches up; `step()` handles what arrives.

    A failed delivery raises: the service stops rather than run on a state the log does not
    hold; restarted, it rebuilds from the log and decides again what was lost. A record that
    fails to validate or to apply never stops it: it goes to the dlq (when read live) and the
    service reads on. What one event or tick decides (a plan and its commands) is sent in one
    transaction of `producer`, so a crash leaves all of it or none. Commands, its own decisions, jobs,
    operators' node events and acks are folded only when signed by who may write them, for this
    deployment (`trust`, provenance.py; all of them when `trust` is None: insecure), so a re-send or
    a plan is only ever the coordinator's own, only operators start jobs or move nodes, and only a
    node answers for itself. Everything it writes is signed with `sign`, naming this deployment.
    """

    def __init__(self, settings: KafkaSettings, config: CoordinatorConfig, *, sign: Signer,
                 producer: TransactionalProducer, epoch: int, rendezvous_root: bytes, trust: Trusted = None,
                 clock: Callable[[], float] = time.time) -> None:
        self.state = ClusterState.initial(config, rendezvous_root)
        self.epoch = epoch
        self._topics = settings.topics
        self._sign = sign
        self._trust = trust if callable(trust) else (lambda: trust)
        self._clock = clock
        topics, name = self._topics, settings.topics.owned("coordinator")
        self._producer = producer
        self._dlq = EventProducer(settings, client_id=f"{name}-dlq")
        self._reader = TopicReader(settings, read_topics(topics), validate=True, dlq=self._dlq, name=name,
                                   timeout_s=30.0)
        self._next_tick = 0.0
        DEAD_LETTERS.labels("coordinator")  # at 0 from the start: a first invalid record is an increase

    def start(self) -> None:
        """Fold the whole log (jobs first: every other event names a job), then catch up."""
        legacy: list[DeadLettered] = []
        records = valid((item for batch in self._reader.batches(give_up_s=60.0) for item in batch),
                        lambda letter: legacy.append(letter) if self._misplaced(letter) else None)
        if legacy:
            log.error("%d coordinator events on %s not folded: written by a coordinator older than the "
                      "recovery topic (then run `trainmedic coordinator --migrate-lifecycle` once, with "
                      "every coordinator stopped; docs/coordinator.md, Upgrading), or forged",
                      len(legacy), " and ".join(sorted({letter.source_topic for letter in legacy})))
        trust = self._members(self._trust(), records)
        # what was dead-lettered live goes; the key rotations were folded, in order, by `_members`
        records = [r for r in records if not isinstance(r.event, NodeKeyRotated)
                   and self._unverified(r, trust, live=False) is None]
        records.sort(key=lambda r: r.topic != self._topics.jobs)
        refused = rebuild(self.state, records, arrived=lambda record: arrival(record, self._topics, None))
        for record, reason in refused:  # dead-lettered when first read live
            log.warning("%s[%d]@%d skipped: %s", record.topic, record.partition, record.offset, reason)
        jobs = self.state.jobs.values()
        log.info("rebuilt from %d events: %d jobs (%d running), %d incidents, %d commands, %d nodes isolated",
                 len(records), len(jobs), sum(j.state is JobState.RUNNING for j in jobs),
                 len(self.state.incidents), len(self.state.commands),
                 sum(not n.healthy for n in self.state.nodes.values()))
        now = self._clock()
        late = unanswered(self.state, [r.event for r in records], [(r.event, why) for r, why in refused], now)
        self._publish("catch-up after start", [*catch_up(self.state, now), *late])
        observe.cluster(self.state, now)  # the gauges say this state from now, not their initial 0s
        self._next_tick = now + self.state.config.tick_s

    def step(self, timeout_s: float = 1.0) -> None:
        """Handle the events that arrive within `timeout_s` (less if a tick is due), then tick."""
        wait = max(0.0, min(timeout_s, self._next_tick - self._clock()))
        trust = self._with_members()  # once a poll: a key added or removed counts from the next one
        changed = False  # membership folded since `trust` was made
        for record in valid(self._reader.poll(wait), self._count_dead_letter):
            if changed and not isinstance(record.event, NodeKeyRotated):  # a rotation is checked by the state
                trust, changed = self._with_members(), False  # a node's key counts from the next record
            if (why := self._unverified(record, trust)) is not None:
                self._dlq.send(self._topics.dlq, record.rejected(why, self._clock()), key=record.topic)
                continue
            observe.received(record.event)
            now = self._clock()
            outputs = receive(self.state, record, now, arrival(record, self._topics, now))
            if isinstance(outputs, str):
                metrics.REJECTED.labels(getattr(record.event, "type", "?")).inc()
                self._dlq.send(self._topics.dlq, record.rejected(outputs, self._clock()), key=record.topic)
                self._publish(cause(record.event), rejected(self.state, record.event, outputs, self._clock()))
                continue
            self._publish(cause(record.event), outputs)
            if isinstance(record.event, MEMBERSHIP):
                log.info("%s", membership(record.event))
                changed = True
        now = self._clock()
        if now >= self._next_tick:
            self._publish("deadline", settle(self.state, tick(self.state, now), now))
            observe.cluster(self.state, now)
            self._next_tick = now + self.state.config.tick_s
        # Node SEV1s are decided when their group window ends, not at the tick after it (up to
        # tick_s later: 0-1 s of every reconfigure's plan phase, issue 47).
        due = group_due(self.state)
        if due is not None and now < due < self._next_tick:
            self._next_tick = due

    def _with_members(self) -> Trust | None:
        trust = self._trust()
        return None if trust is None else trust.with_members(self.state)

    def _members(self, trust: Trust | None, records: list[Record]) -> Trust | None:
        """`trust` with the log's membership, for a rebuild (`members_first`)."""
        if trust is None:
            return None
        return members_first(trust, self.state, records, self._topics, lambda s, e: apply(s, e, None))

    def _misplaced(self, letter: DeadLettered) -> str | None:
        """The topic suffix of a dead letter whose kind another topic carries (a coordinator's
        decision on incidents, a re-admission on nodes), or None."""
        spec = self._topics.spec_of(letter.source_topic)
        if spec is not None and misplaced(spec.suffix, letter.raw_value()) is not None:
            return spec.suffix
        return None

    def _count_dead_letter(self, letter: DeadLettered) -> None:
        """Count a record read live that the reader dead-lettered (nothing acts on it): as misplaced
        when another topic carries its kind, else as invalid."""
        if (suffix := self._misplaced(letter)) is not None:
            metrics.MISPLACED_RECORDS.labels(suffix).inc()
        else:
            DEAD_LETTERS.labels("coordinator").inc()

    def _unverified(self, record: Record, trust: Trust | None, *, live: bool = True) -> str | None:
        """Why `record` is not signed by who may write it (logged; counted when read live, not again
        on every rebuild), or None."""
        why = (impersonates(record, self._topics.incidents) or skewed(record)
               or unverified(record, trust, self._topics, self.state)
               or (None if trust is None else stale(record)))  # insecure: no signature, no replay check
        if why is None:
            return None
        if live and why.kind == "misplaced":
            metrics.MISPLACED_RECORDS.labels("incidents").inc()
        elif live:
            metrics.UNVERIFIED.labels(getattr(record.event, "type", "?"), why.kind).inc()
        log.warning("%s[%d]@%d not folded: %s", record.topic, record.partition, record.offset, why)
        return str(why)

    def _publish(self, trigger: str, outputs: list) -> None:
        """Send `outputs` (folded already) in one transaction, with the open incidents of each job they
        end resolved (`resolutions`, folded here)."""
        if not outputs:
            return
        now = self._clock()
        outputs = [*outputs, *settle(self.state, resolutions(self.state, outputs, now), now)]
        for line in narrate(trigger, outputs, self.state):
            log.info("%s", line)
        observe.published(self.state, outputs)
        stamp = {"deployment": self._topics.prefix}
        with self._producer.transaction():
            for event in outputs:
                suffix, key = route(event)
                update = {**stamp, "epoch": self.epoch, "placement": self._placement(event)} if isinstance(
                    event, Command) else stamp
                self._producer.send(self._topics.name(suffix), self._sign(event.model_copy(update=update)),
                                    key=key)
        self._dlq.flush()

    def _placement(self, command: Command) -> Placement | None:
        """The signed placement of the ranks a start or restart launches (schemas `Placement`)."""
        if command.action not in (CommandAction.START, CommandAction.RESTART) or command.worker is None:
            return None
        return self._sign(Placement(job=command.job, generation=command.generation, node=command.node,
                                    ranks=command.worker.ranks, deployment=self._topics.prefix))

    def close(self) -> None:
        self._reader.close()
        for producer in (self._dlq, self._producer):
            try:
                producer.close()
            except KafkaError as err:  # fenced, or the broker gone: nothing left to save
                log.warning("closing the coordinator: %s", err)


def lead(settings: KafkaSettings, config: CoordinatorConfig, *, sign: Signer, trust: Trusted,
         rendezvous_root: bytes, stop: threading.Event) -> None:
    """Coordinate while this process holds the lease; wait for it while another does; until `stop`.

    A holder that loses the lease (its session expired: it was paused or cut off) or is
    fenced by a newer holder stands down and waits again, with a fresh state from the log.
    """
    lease = Lease(settings)
    metrics.LEADING.set(0)
    try:
        while lease.acquire(stop):
            try:
                _lead_once(settings, config, sign, trust, rendezvous_root, stop, lease)
            finally:
                metrics.LEADING.set(0)
    finally:
        lease.release()


def _lead_once(settings: KafkaSettings, config: CoordinatorConfig, sign: Signer, trust: Trusted,
               rendezvous_root: bytes, stop: threading.Event, lease: Lease) -> None:
    producer = TransactionalProducer(settings, transactional_id=settings.topics.owned("coordinator"))
    service = None
    try:
        epoch = lease.take(producer)
        log.info("leading at epoch %d", epoch)
        service = CoordinatorService(settings, config, sign=sign, producer=producer, epoch=epoch,
                                     trust=trust, rendezvous_root=rendezvous_root)
        service.start()
        # Leading from here, where it acts on the rebuilt state and its gauges say it: the rules read
        # the leader's trainmedic_isolations_left, which holds no count before (docs/metrics.md).
        metrics.LEADING.set(1)
        while not stop.is_set() and lease.held():
            service.step()
        if not stop.is_set():
            log.warning("epoch %d: lease lost; standing down and waiting for it again", epoch)
    except Fenced as err:
        # leave the group too: this process may still look like the holder until its next poll, and
        # taking the lease again now would fence the real holder in turn
        log.warning("fenced by a newer coordinator, standing down: %s", err)
        lease.release()
    finally:
        if service is not None:
            service.close()  # closes the producer too
        else:
            with contextlib.suppress(KafkaError):
                producer.close(timeout_s=5.0)
