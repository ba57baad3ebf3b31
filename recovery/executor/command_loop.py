"""The executor's Kafka loop: read this node's commands and hand each to the room that applies them
(command_applier.py); reap the ranks that ended and tell it to the room that reports what ranks do
(rank_reporter.py); adopt what a previous executor left. Thin: every decision is `decide`, every state
move the `GroupState` table (docs/executor.md, "Command flow", "Poison messages and Kafka errors").
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable

from trainmedic.bus.message import Record
from trainmedic.bus.metrics import DEAD_LETTERS
from trainmedic.bus.reader import At, Start, TopicReader, partition_count, partition_of
from trainmedic.bus.settings import KafkaSettings
from trainmedic.common.errors import KafkaError
from trainmedic.recovery.executor import leftovers, metrics, owner_file
from trainmedic.recovery.executor.command_applier import CommandApplier
from trainmedic.recovery.executor.config import ExecutorConfig
from trainmedic.recovery.executor.core import slurm_owner
from trainmedic.recovery.executor.core.rank_env import base_env
from trainmedic.recovery.executor.forkserver import PRELOAD_ENV, set_dumpable
from trainmedic.recovery.executor.job_cgroup import JobCgroups
from trainmedic.recovery.executor.job_trees import JobTrees
from trainmedic.recovery.executor.ledger import Ledger
from trainmedic.recovery.executor.node_producer import NodeProducer
from trainmedic.recovery.executor.rank_reporter import RankReporter
from trainmedic.recovery.executor.rank_users import JobUids, OneUser
from trainmedic.recovery.executor.supervisor import RankExit, Supervisor
from trainmedic.schemas import DeadLettered, NodeJoined, NodeLeaving

log = logging.getLogger(__name__)

HEARD_WARN_S = 30.0  # a node whose agent had no heartbeat delivered for this long says why it has not joined
OWNER_CHECK_S = 2.0  # how often a node Slurm schedules reads which job owns it (--slurm-owner-file)


class Executor:
    """One node's executor. `run(stop)` serves until `stop` is set, then stops its ranks."""

    def __init__(
        self, config: ExecutorConfig, kafka: KafkaSettings, *, clock: Callable[[], float] = time.time,
        heard: threading.Event | None = None,
    ) -> None:
        self.config = config
        # Set once Kafka took a heartbeat of this node's agent (`trainmedic node`): the executor joins
        # only then, so that a node the coordinator counts as ready is one the detector watches (it
        # arms a node's loss at its first heartbeat). None: it joins as soon as it reads its commands.
        self.heard = heard
        self._joined = False
        self._unheard_since = 0.0  # set when `run` starts
        self._unheard_said = False
        self.kafka = kafka
        self.clock = clock
        self.supervisor = Supervisor(config.state_dir / "ranks.json",
                                     on_end=lambda job: self.reporter.unlisten(job),
                                     allowed_dirs=config.admission.allowed_dirs)
        self.producer = NodeProducer(config, kafka)
        self.reporter = RankReporter(config, kafka, self.producer, self.supervisor, clock=clock)
        self.applier = CommandApplier(config, kafka, self.producer, self.supervisor, self.reporter,
                                      clock=clock)
        self.ready = threading.Event()  # set once reading from the partition
        self.emptied = threading.Event()  # set once leaving and no rank runs here any more
        self._leaving = threading.Event()  # set by `leave`: announced on the loop's next turn
        self._leave_reason = ""
        self._announced = False
        self._owner_checked = 0.0  # when the Slurm owner file was last read
        DEAD_LETTERS.labels("executor")  # at 0 from the start: a first invalid command is an increase

    def run(self, stop: threading.Event) -> None:
        topic = self.kafka.topics.commands
        partition = partition_of(self.config.node, partition_count(self.kafka, topic))
        set_dumpable(False)  # no process of its user (a rank without run_as) may ptrace it or read it
        self.applier.ledger = ledger = Ledger.open(self.config.ledger_path(self.kafka.topics.prefix))
        self.reporter.start()  # first: adopted ranks report to it at once
        config = self.config
        cgroups = JobCgroups.here(config.node, config.state_dir, config.job_pids_max, config.job_memory_max)
        users = (OneUser(config.rank_user) if config.job_uids is None
                 else JobUids.parse(config.job_uids, config.state_dir / "job-uids.json"))
        self.supervisor.use_trees(JobTrees(warm=config.warm_start, env=self._server_env(), users=users,
                                           cgroups=cgroups))
        self._take_over()
        reader = self._reader(topic, partition)
        log.info("executor for node %s: commands from %s partition %d, %s; state in %s",
                 self.config.node, topic, partition,
                 "insecure (unsigned commands accepted)" if self.config.insecure else "signed commands only",
                 self.config.state_dir)
        try:
            reader.open()  # assign now, so that `ready` means "reading"
            self._unheard_since = time.monotonic()
            self._join_once_heard()
            self.ready.set()
            while not stop.is_set():
                try:
                    self._join_once_heard()
                    self._serve_once(reader)
                    if self._leaving.is_set():
                        self._while_leaving()
                except KafkaError as err:
                    # Ranks keep training while Kafka is away; a lost ack is logged, never re-applied.
                    # A reader that failed for good is opened again where the ledger left off.
                    log.error("Kafka: %s; %s in 1s", err, "retrying" if err.retryable else "reopening")
                    if not err.retryable:
                        reader.close()
                        reader = self._reader(topic, partition)
                    stop.wait(1.0)
        finally:
            if self._leaving.is_set() and not self._announced:  # told to leave and stop at once
                self._while_leaving()
            exits = self.supervisor.stop_all(self.config.stop_grace_s)
            reader.close()
            ledger.close()
            self.reporter.close()
            try:
                for ended in exits:  # stopped as the node shuts down on purpose, or as the executor stops
                    self.reporter.publish_exit(ended, stopped=self._leaving.is_set())
                self.producer.events.flush(timeout_s=10.0)
            except KafkaError as err:
                log.error("could not report %d rank exits at shutdown: %s", len(exits), err)
            log.info("executor for node %s stopped", self.config.node)

    def leave(self, reason: str) -> None:
        """The node shuts down on purpose (thread-safe): the loop announces `node_leaving` on its next
        turn and sets `emptied` once no rank runs here, the coordinator's stops applied."""
        self._leave_reason = reason
        self._leaving.set()

    def _join_once_heard(self) -> None:
        """Announce the join, once: at once, or once the agent's first heartbeat was delivered; said
        in a WARNING when none was within HEARD_WARN_S."""
        if self._joined or self._leaving.is_set():  # a join after a leave would end that leave
            return
        if self.heard is not None and not self.heard.is_set():
            if not self._unheard_said and time.monotonic() - self._unheard_since >= HEARD_WARN_S:
                self._unheard_said = True
                log.warning("node %s: no heartbeat of its agent delivered in %.0fs, so it has not joined "
                            "(no new work comes to it): is the agent's principal refused by the broker? "
                            "(its log says)", self.config.node, HEARD_WARN_S)
            return
        self.announce_joined()
        self._joined = True

    def announce_joined(self) -> None:
        """Tell the coordinator this node takes commands; it ends a leave the node announced before."""
        self.producer.report(NodeJoined(ts=self.clock(), node=self.config.node))
        self.producer.flush()
        log.info("node %s: joined (announced on %s)", self.config.node, self.kafka.topics.acks)

    def announce_leaving(self, reason: str) -> None:
        """Tell the coordinator this node shuts down on purpose: a drain of the node, by the node."""
        self.producer.report(NodeLeaving(ts=self.clock(), node=self.config.node, reason=reason))
        self.producer.flush()
        log.info("node %s: announced that it leaves (%s); the coordinator moves its jobs off it",
                 self.config.node, reason)

    def _while_leaving(self) -> None:
        if not self._announced:
            self._announced = True
            self.announce_leaving(self._leave_reason)
        if not self.emptied.is_set() and self.supervisor.running() == 0:
            log.info("node %s: no rank runs here any more", self.config.node)
            self.emptied.set()

    def _take_over(self) -> None:
        """What a previous executor left (leftovers.py): adopt the ranks that still run as the ledger
        says they should, report those killed or ended, answer the command it was applying."""
        found = leftovers.take_over(self.config.state_dir / "ranks.json", self.applier.ledger.state)
        self.supervisor.adopt(found.adopt)
        self.supervisor.trees.sweep(keep={rank.job for rank in found.adopt})
        self.reporter.take_over(found, self.applier.ledger.state.placements)
        self.applier.take_over(found)

    def _reader(self, topic: str, partition: int) -> TopicReader:
        """A reader of this node's partition from where the ledger left off; on a first start, from
        the commands still fresh enough to apply."""
        position = self.applier.ledger.state.positions.get((topic, partition))
        start: Start = ({(topic, partition): position} if position is not None
                        else At(self.clock() - self.config.freshness_s))
        return TopicReader(self.kafka, partitions=[(topic, partition)], start=start, validate=True,
                           name=self.kafka.topics.owned(f"executor-{self.config.node}"), timeout_s=15.0)

    def _serve_once(self, reader: TopicReader) -> None:
        for item in reader.poll(self.config.poll_s, max_messages=100):
            self._handle(item)
        self._reap()
        self._evict_unowned()
        self.applier.finish_checks()
        self.producer.flush()

    def _reap(self) -> None:
        """Report and fold the ranks that ended on their own since the last look."""
        self._fold_exits(self.supervisor.reap())

    def _evict_unowned(self) -> None:
        """On a node Slurm schedules, stop the ranks of every job the node no longer belongs to (its
        allocation ended, and the batch script that would have stopped the job is gone): the epilog
        removed the owner file, or a later job's prolog replaced it."""
        if self.config.slurm_owner_file is None or time.monotonic() < self._owner_checked + OWNER_CHECK_S:
            return
        self._owner_checked = time.monotonic()
        said = owner_file.read(self.config)
        for job in self.supervisor.jobs():
            why = slurm_owner.refusal(job, *said)
            if why is not None:
                log.warning("job %s: %s; stopping its ranks", job, why)
                self._fold_exits(self.supervisor.stop(job, self.config.stop_grace_s))

    def _fold_exits(self, exits: list[RankExit]) -> None:
        for index, ended in enumerate(exits):
            # ranks reaped together are all gone from the supervisor: the later ones are not yet folded
            later = sum(1 for other in exits[index + 1:] if other.job == ended.job)
            self.reporter.publish_exit(ended, tail=ended.tail)
            finished = self.applier.fold_exit(ended, self.supervisor.alive(ended.job) + later)
            if finished is not None:
                self.reporter.report_finished(finished)

    def _handle(self, item: Record | DeadLettered) -> None:
        """Apply one command; one that raises is dead-lettered and read past."""
        if isinstance(item, DeadLettered):
            log.warning("invalid command at %s[%d]@%d: %s", item.source_topic, item.partition,
                        item.offset, item.reason)
            DEAD_LETTERS.labels("executor").inc()
            self.applier.dead_letter(item)
            return
        try:
            self.applier.apply(item)
        except Exception as err:  # a bug or a value nobody foresaw: never a reason to stop the ranks
            metrics.POISON.inc()
            log.exception("command at %s[%d]@%d failed: dead-lettered, read past", item.topic, item.partition,
                          item.offset)
            why = f"executor error: {type(err).__name__}: {err}"
            self.applier.dead_letter(item.rejected(why, self.clock()))

    def _server_env(self) -> dict[str, str]:
        """The job launchers' environment: what every rank gets, so that no credential is in the
        memory a forked rank inherits (its /proc/PID/environ is the launcher's)."""
        preload = {PRELOAD_ENV: os.environ[PRELOAD_ENV]} if os.environ.get(PRELOAD_ENV) else {}
        return {**base_env(os.environ, self.config.admission.rank_env), **preload}
