"""The executor's Kafka loop: read this node's commands, decide, apply, ack; report rank exits and what
the ranks report. Thin: every decision is `decide`, every state move the `GroupState` table
(docs/executor.md, "Command flow", "Poison messages and Kafka errors").
"""

from __future__ import annotations

import json
import logging
import os
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from pydantic import BaseModel

from trainmedic.bus.errors import KafkaError
from trainmedic.bus.message import Record
from trainmedic.bus.metrics import DEAD_LETTERS
from trainmedic.bus.producer import EventProducer
from trainmedic.bus.reader import At, Start, TopicReader, partition_count, partition_of
from trainmedic.bus.settings import KafkaSettings
from trainmedic.producers.outbox import Outbox
from trainmedic.producers.report_channel import SOCKET_ENV
from trainmedic.recovery.executor import job_dirs, leftovers, metrics
from trainmedic.recovery.executor.config import ExecutorConfig
from trainmedic.recovery.executor.core.admission import admit
from trainmedic.recovery.executor.core.decide import Apply, Decision, Reack, Refuse, Skip, Step, decide
from trainmedic.recovery.executor.core.ledger_state import RecordedAck
from trainmedic.recovery.executor.core.phases import RankTimes, rank_phases
from trainmedic.recovery.executor.core.rank_env import base_env, rank_env
from trainmedic.recovery.executor.core.reports import LaunchedRank, Report
from trainmedic.recovery.executor.core.restart import interrupted_answer, unanswered
from trainmedic.recovery.executor.core.state import GroupState, LocalGroup, after_exit, fenced_at
from trainmedic.recovery.executor.forkserver import PRELOAD_ENV, set_dumpable
from trainmedic.recovery.executor.job_cgroup import JobCgroups
from trainmedic.recovery.executor.job_trees import JobTrees
from trainmedic.recovery.executor.ledger import Ledger
from trainmedic.recovery.executor.rank_users import JobUids, OneUser
from trainmedic.recovery.executor.report_server import ReportServer, socket_folder
from trainmedic.recovery.executor.supervisor import RankExit, Supervisor
from trainmedic.recovery.keyring import KeyFolder
from trainmedic.recovery.worker import reform
from trainmedic.recovery.worker.env import WorkerEnv
from trainmedic.schemas import (
    AckStatus,
    Command,
    CommandAcked,
    DeadLettered,
    NodeJoined,
    NodeLeaving,
    NodeReport,
    RanksFinished,
    WorkerExited,
)
from trainmedic.schemas.commands import CommandAction
from trainmedic.schemas.telemetry import WorkerWaiting

log = logging.getLogger(__name__)


class Executor:
    """One node's executor. `run(stop)` serves until `stop` is set, then stops its ranks."""

    def __init__(
        self, config: ExecutorConfig, kafka: KafkaSettings, *, clock: Callable[[], float] = time.time,
    ) -> None:
        self.config = config
        self.kafka = kafka
        self.clock = clock
        self.supervisor = Supervisor(config.state_dir / "ranks.json",
                                     on_end=lambda job: self._reports.unlisten(job),
                                     allowed_dirs=config.admission.allowed_dirs)
        self.groups: dict[str, LocalGroup] = {}
        self.producer = EventProducer(kafka, client_id=kafka.topics.owned(f"executor-{config.node}"))
        self._ledger: Ledger | None = None
        self._keys = (None if config.trusted is None or config.keys_dir is None
                      else KeyFolder(config.keys_dir, config.trusted))  # picks up rotated keys
        self.ready = threading.Event()  # set once reading from the partition
        self.emptied = threading.Event()  # set once leaving and no rank runs here any more
        self._leaving = threading.Event()  # set by `leave`: announced on the loop's next turn
        self._leave_reason = ""
        self._announced = False
        self._launched: dict[int, LaunchedRank] = {}  # by pid: who each rank's reports must say it is
        self._rank_times: dict[int, RankTimes] = {}  # by pid: the phases of its start (core/phases.py)
        self._waiting: set[int] = set()  # pids of ranks waiting alive to re-form (`Runtime.run`)
        self._report_outbox = Outbox(
            EventProducer(kafka, client_id=kafka.topics.owned(f"executor-{config.node}-reports")),
            what="rank reports")
        self._reports = ReportServer(socket_folder(config.state_dir), node=config.node,
                                     resolve=self._launched.get, publish=self._publish_report, clock=clock,
                                     on_tick=self._report_outbox.poll)
        DEAD_LETTERS.labels("executor")  # at 0 from the start: a first invalid command is an increase

    def run(self, stop: threading.Event) -> None:
        topic = self.kafka.topics.commands
        partition = partition_of(self.config.node, partition_count(self.kafka, topic))
        set_dumpable(False)  # no process of its user (a rank without run_as) may ptrace it or read it
        self._ledger = ledger = Ledger.open(self.config.ledger_path(self.kafka.topics.prefix))
        self._reports.start()  # first: adopted ranks report to it at once
        config = self.config
        cgroups = JobCgroups.here(config.node, config.state_dir, config.job_pids_max, config.job_memory_max)
        users = (OneUser(config.rank_user) if config.job_uids is None
                 else JobUids.parse(config.job_uids, config.state_dir / "job-uids.json"))
        self.supervisor.use_trees(JobTrees(warm=config.warm_start, env=self._server_env(), users=users,
                                           cgroups=cgroups))
        self._take_over(ledger)
        reader = self._reader(topic, partition)
        log.info("executor for node %s: commands from %s partition %d, %s; state in %s",
                 self.config.node, topic, partition,
                 "insecure (unsigned commands accepted)" if self.config.insecure else "signed commands only",
                 self.config.state_dir)
        try:
            reader.open()  # assign now, so that `ready` means "reading"
            self.announce_joined()
            self.ready.set()
            while not stop.is_set():
                try:
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
            self._reports.close()
            self._report_outbox.flush(5.0)
            try:
                for ended in exits:  # stopped as the node shuts down on purpose, or as the executor stops
                    self._publish_exit(ended, stopped=self._leaving.is_set())
                self.producer.flush(timeout_s=10.0)
            except KafkaError as err:
                log.error("could not report %d rank exits at shutdown: %s", len(exits), err)
            log.info("executor for node %s stopped", self.config.node)

    def leave(self, reason: str) -> None:
        """The node shuts down on purpose (thread-safe): the loop announces `node_leaving` on its next
        turn and sets `emptied` once no rank runs here, the coordinator's stops applied."""
        self._leave_reason = reason
        self._leaving.set()

    def announce_joined(self) -> None:
        """Tell the coordinator this node takes commands; it ends a leave the node announced before."""
        self._report(NodeJoined(ts=self.clock(), node=self.config.node))
        self._flush()
        log.info("node %s: joined (announced on %s)", self.config.node, self.kafka.topics.acks)

    def announce_leaving(self, reason: str) -> None:
        """Tell the coordinator this node shuts down on purpose: a drain of the node, by the node."""
        self._report(NodeLeaving(ts=self.clock(), node=self.config.node, reason=reason))
        self._flush()
        log.info("node %s: announced that it leaves (%s); the coordinator moves its jobs off it",
                 self.config.node, reason)

    def _while_leaving(self) -> None:
        if not self._announced:
            self._announced = True
            self.announce_leaving(self._leave_reason)
        if not self.emptied.is_set() and self.supervisor.running() == 0:
            log.info("node %s: no rank runs here any more", self.config.node)
            self.emptied.set()

    def _take_over(self, ledger: Ledger) -> None:
        """What a previous executor left (leftovers.py): adopt the ranks that still run as the ledger
        says they should, report those killed or ended, answer the command it was applying."""
        found = leftovers.take_over(self.config.state_dir / "ranks.json", ledger.state)
        self.supervisor.adopt(found.adopt)
        self.supervisor.trees.sweep(keep={rank.job for rank in found.adopt})
        for rank in found.adopt:  # they keep reporting; their place among local ranks is not recorded
            self._launched[rank.pid] = LaunchedRank(rank.job, rank.generation, rank.rank, rank.world_size)
            self._channel(rank.job)
        for rank, _ in found.kill:  # ranks the ledger says must not run: this executor's own stop
            self._publish_exit(RankExit(rank.job, rank.generation, rank.rank, rank.world_size, rank.pid,
                                        None, signal.SIGKILL), stopped=True)
        unknown = "ended while no executor watched it: exit status unknown"
        for rank in found.ended:
            self._publish_exit(RankExit(rank.job, rank.generation, rank.rank, rank.world_size, rank.pid,
                                        None, None, unknown))
        interrupted = unanswered(ledger.state)
        if interrupted is not None:
            answer = interrupted_answer(interrupted, found.launched)
            log.warning("command %s was being applied when the previous executor died: %s (%s)",
                        interrupted.id, answer.status, answer.reason)
            ledger.record_answer(interrupted.id, answer)
        newest = ledger.state.newest
        if newest is not None and newest.id in ledger.state.answers:
            # sent at every start: the previous executor may have died between recording the answer
            # and sending it, and a coordinator that got `accepted` never re-sends; it ignores a repeat
            answer = ledger.state.answers[newest.id]
            self._send_ack(newest.id, newest.job, newest.generation, AckStatus(answer.status),
                           reason=answer.reason, elapsed_s=answer.elapsed_s)
        for job, generation in ledger.state.generations.items():
            state = GroupState.RUNNING if (job, generation) in found.running else GroupState.STOPPED
            self.groups[job] = LocalGroup(job, generation, state)

    def _reader(self, topic: str, partition: int) -> TopicReader:
        """A reader of this node's partition from where the ledger left off; on a first start, from
        the commands still fresh enough to apply."""
        position = self._ledger.state.positions.get((topic, partition))
        start: Start = ({(topic, partition): position} if position is not None
                        else At(self.clock() - self.config.freshness_s))
        return TopicReader(self.kafka, partitions=[(topic, partition)], start=start, validate=True,
                           name=self.kafka.topics.owned(f"executor-{self.config.node}"), timeout_s=15.0)

    def _serve_once(self, reader: TopicReader) -> None:
        for item in reader.poll(self.config.poll_s, max_messages=100):
            self._handle(item)
        self._reap()
        self._flush()

    def _reap(self) -> None:
        """Report and fold the ranks that ended on their own since the last look."""
        exits = self.supervisor.reap()
        for index, ended in enumerate(exits):
            # ranks reaped together are all gone from the supervisor: the later ones are not yet folded
            later = sum(1 for other in exits[index + 1:] if other.job == ended.job)
            self._on_exit(ended, self.supervisor.alive(ended.job) + later)

    def _handle(self, item: Record | DeadLettered) -> None:
        """Decide and apply one command; one that raises is dead-lettered and read past."""
        if isinstance(item, DeadLettered):
            log.warning("invalid command at %s[%d]@%d: %s", item.source_topic, item.partition,
                        item.offset, item.reason)
            DEAD_LETTERS.labels("executor").inc()
            self._dead_letter(item)
            return
        try:
            self._command(item)
        except Exception as err:  # a bug or a value nobody foresaw: never a reason to stop the ranks
            metrics.POISON.inc()
            log.exception("command at %s[%d]@%d failed: dead-lettered, read past", item.topic, item.partition,
                          item.offset)
            self._dead_letter(item.rejected(f"executor error: {type(err).__name__}: {err}", self.clock()))

    def _dead_letter(self, letter: DeadLettered) -> None:
        ledger, where = self._ledger, (letter.source_topic, letter.partition)
        if ledger.state.positions.get(where, 0) <= letter.offset:
            ledger.record(topic=letter.source_topic, partition=letter.partition, offset=letter.offset)
        self._send(self.kafka.topics.dlq, letter, key=letter.source_topic)

    def _command(self, item: Record) -> None:
        ledger = self._ledger
        command: Command = item.event
        where = {"topic": item.topic, "partition": item.partition, "offset": item.offset}
        if command.node != self.config.node:  # another node whose key shares our partition
            log.debug("command %s is for node %s; not ours", command.id, command.node)
            ledger.record(**where)
            return
        group = self.groups.get(command.job)
        decision = decide(
            command, received=item.value, node=self.config.node,
            trusted=self._keys.trusted() if self._keys else self.config.trusted,
            now=self.clock(), freshness_s=self.config.freshness_s, group=group, applied=ledger.state.applied,
            answers=ledger.state.answers, epoch=ledger.state.epoch, deployment=self.kafka.topics.prefix,
        )
        decision = self._admitted(command, decision)
        if isinstance(decision, Skip):
            log.info("command %s skipped: %s", command.id, decision.reason)
            ledger.record(**where)
            return
        if isinstance(decision, Reack):
            log.info("command %s: %s", command.id, decision.reason)
            ledger.record(**where)
            answer = decision.answer
            self._ack(command, AckStatus(answer.status), reason=answer.reason, elapsed_s=answer.elapsed_s)
            return
        if isinstance(decision, Refuse):
            if decision.unverified:
                metrics.UNVERIFIED.inc()
            log.warning("command %s (%s %s g%d) REFUSED: %s", command.id, command.action, command.job,
                        command.generation, decision.reason)
            ledger.record(**where)
            self._ack(command, AckStatus.REFUSED, reason=decision.reason)
            return
        ledger.record(**where, command_id=command.id, job=command.job, generation=command.generation,
                      applied=True, action=command.action, epoch=command.epoch,
                      ranks=command.worker.ranks if command.worker is not None else None)
        self._apply(command, decision, group)

    def _admitted(self, command: Command, decision: Decision) -> Decision:
        """`decision`, unless it launches ranks whose command the admission policy does not allow:
        then a refusal naming the rule, before anything (a stop included) is done."""
        if not isinstance(decision, Apply) or Step.LAUNCH not in decision.steps:
            return decision
        refusal = admit(self.config.admission, command.worker)
        if refusal is None:
            return decision
        metrics.ADMISSION_REFUSALS.labels(refusal.rule).inc()
        return Refuse(str(refusal))

    def _apply(self, command: Command, decision: Apply, group: LocalGroup | None) -> None:
        log.info("command %s: %s job %s g%d: %s", command.id, command.action, command.job,
                 command.generation, decision.note)
        self._ack(command, AckStatus.ACCEPTED)
        self._flush()
        started = time.monotonic()
        group = fenced_at(group or LocalGroup(command.job, command.generation), command.generation)
        kept = self._survivors(command)
        try:
            for step in decision.steps:
                group = self._run_step(step, command, group, kept)
        except (OSError, RuntimeError, ValueError, TypeError) as err:  # e.g. an argv execve refuses
            self.groups[command.job] = group
            log.error("command %s failed: %s", command.id, err)
            self._answer(command, RecordedAck(AckStatus.FAILED, str(err), time.monotonic() - started))
            return
        self.groups[command.job] = group
        self._answer(command, RecordedAck(AckStatus.DONE, None, time.monotonic() - started))

    def _answer(self, command: Command, answer: RecordedAck) -> None:
        """The final ack, written to the ledger before it is sent: a redelivery is answered with it."""
        self._ledger.record_answer(command.id, answer)
        self._ack(command, AckStatus(answer.status), reason=answer.reason, elapsed_s=answer.elapsed_s)

    def _run_step(self, step: Step, command: Command, group: LocalGroup, kept: dict[int, int]) -> LocalGroup:
        """One step of a command; `kept` (pid -> local rank): ranks re-formed in place, neither
        stopped nor started again."""
        began = time.monotonic()
        if step == Step.STOP:
            group = group.to(GroupState.STOPPING)
            for ended in self.supervisor.stop(command.job, self.config.stop_grace_s, keep=kept):
                self._publish_exit(ended, stopped=True)
            metrics.RECOVERY_PHASE.labels("stop").observe(time.monotonic() - began)
            return group.to(GroupState.STOPPED)
        if step == Step.LAUNCH:
            spec = command.worker
            new = [local_rank for local_rank in range(len(spec.ranks)) if local_rank not in kept.values()]
            envs = [self._rank_env(command, local_rank) for local_rank in new]
            some = spec.model_copy(update={"ranks": tuple(spec.ranks[i] for i in new)})
            job_dir = self.config.job_dir(command.job, spec.submission)
            pids = self.supervisor.launch(command.job, command.generation, some, envs, job_dir) if new else []
            launched = time.monotonic()
            for local_rank, pid in zip(new, pids, strict=True):
                self._launched[pid] = LaunchedRank(command.job, command.generation, spec.ranks[local_rank],
                                                   spec.world_size, local_rank, spec.failure.hang_floor_s,
                                                   spec.submission)
                self._rank_times[pid] = RankTimes(launched)
            for pid, local_rank in kept.items():
                self._keep(command, pid, local_rank, launched)
            metrics.RECOVERY_PHASE.labels("launch").observe(launched - began)
            if new:  # behind the command: snapshots may be many GB, and the ranks train meanwhile
                threading.Thread(target=self._prune, args=(job_dir,), name="prune", daemon=True).start()
            return group.to(GroupState.RUNNING, spec=spec)
        sent = self.supervisor.signal(command.job, signal.SIGUSR1)
        if sent == 0:
            raise RuntimeError(f"no live rank of job {command.job} to signal")
        log.info("job %s: SIGUSR1 (reattempt) sent to %d ranks", command.job, sent)
        return group

    @staticmethod
    def _prune(job_dir: Path) -> None:
        """Earlier submissions' files of the job (job_dirs.prune), in a thread of its own; a failure is
        logged, never the command's."""
        try:
            job_dirs.prune(job_dir)
        except Exception:
            log.exception("could not remove earlier submissions' files beside %s", job_dir)

    def _survivors(self, command: Command) -> dict[int, int]:
        """The ranks a restart keeps (pid -> local rank): those of its job waiting alive to re-form
        (`Runtime.run`, after a peer's failure) at the same rank and world size, of the same
        submission (its HOME is where it waits). Every other rank is stopped and started again, as
        one that is hung, or whose script does not wait."""
        spec = command.worker
        if command.action is not CommandAction.RESTART or spec is None:
            return {}
        kept = {}
        for rank, pid in self.supervisor.pids(command.job).items():
            launched = self._launched.get(pid)
            if (pid in self._waiting and launched is not None and launched.generation < command.generation
                    and launched.world_size == spec.world_size and rank in spec.ranks
                    and launched.submission == spec.submission):
                kept[pid] = spec.ranks.index(rank)
        return kept

    def _keep(self, command: Command, pid: int, local_rank: int, now: float) -> None:
        """Name the next generation to a rank kept alive: its contract in the job's directory, where
        it waits; from now on its reports are about that generation."""
        launched = self._launched[pid]
        job_dirs.put(self.config.job_dir(command.job, command.worker.submission), reform.REFORM_DIR,
                     reform.file_name(launched.rank),
                     json.dumps(self._contract(command, local_rank).to_env()))
        self._launched[pid] = replace(launched, generation=command.generation)  # its reports from now on
        self._waiting.discard(pid)
        self._rank_times[pid] = RankTimes(now)
        self.supervisor.regenerate(command.job, pid, command.generation)
        metrics.RANKS_KEPT.inc()
        log.info("job %s g%d: rank %d (pid %d) kept: it re-forms in its own process", command.job,
                 command.generation, launched.rank, pid)

    def _contract(self, command: Command, local_rank: int) -> WorkerEnv:
        spec = command.worker
        return WorkerEnv(
            master_addr=spec.master_addr, master_port=spec.master_port, rank=spec.ranks[local_rank],
            world_size=spec.world_size, local_rank=local_rank, local_world_size=len(spec.ranks),
            job=command.job, node=self.config.node, generation=command.generation, restore=spec.restore,
            checkpoint_dir=job_dirs.checkpoints(spec.checkpoint_dir, command.job, spec.submission),
            snapshot_dir=str(self.config.snapshot_dir(command.job, spec.submission)),
            collective_timeout_s=spec.failure.collective_timeout_s, hang_floor_s=spec.failure.hang_floor_s,
            submission=spec.submission, resume=spec.resume, rendezvous_key=spec.rendezvous_key,
        )

    def _rank_env(self, command: Command, local_rank: int) -> dict[str, str]:
        return rank_env(os.environ, self.config.admission.rank_env, self._channel(command.job),
                        self._contract(command, local_rank).to_env(), job=command.worker.env)

    def _server_env(self) -> dict[str, str]:
        """The job launchers' environment: what every rank gets, so that no credential is in the
        memory a forked rank inherits (its /proc/PID/environ is the launcher's)."""
        preload = {PRELOAD_ENV: os.environ[PRELOAD_ENV]} if os.environ.get(PRELOAD_ENV) else {}
        return {**base_env(os.environ, self.config.admission.rank_env), **preload}

    def _channel(self, job: str) -> dict[str, str]:
        """Where the in-band hook of a rank of `job` reports: the job's socket of this executor, in a
        folder only the job's group may enter (no broker, no credentials)."""
        user = self.supervisor.trees.users.of(job)
        return {SOCKET_ENV: str(self._reports.listen(job, None if user is None else user.gid))}

    def _publish_report(self, report: Report) -> None:
        """A rank's report, checked and stamped (report_server.py's thread): on telemetry.worker, or
        dropped and counted, never waited for. The phases of its rank's start it ends are timed. A
        rank waiting to re-form is noted, not published: the next restart keeps it, unless it reports
        anything after (an error of its own: it does not wait, and keeping it made the restart a
        no-op for it)."""
        if isinstance(report, WorkerWaiting):
            self._waiting.add(report.pid)
            return
        self._waiting.discard(report.pid)  # it said more since: it is not waiting (a restart stops it)
        self._report_outbox.send(self.kafka.topics.worker, report, key=report.job)
        self._report_outbox.poll()
        times = self._rank_times.get(report.pid)
        for phase, seconds in rank_phases(times, report, time.monotonic()) if times is not None else ():
            metrics.RECOVERY_PHASE.labels(phase).observe(seconds)

    def _on_exit(self, ended: RankExit, still_alive: int) -> None:
        """One rank ended on its own; `still_alive` of its job's ranks have not (yet) been folded."""
        self._publish_exit(ended, tail=ended.tail)
        group = self.groups.get(ended.job)
        if group is not None and group.generation == ended.generation:
            after = after_exit(group, ended.clean, still_alive)
            self.groups[ended.job] = after
            if after.state == GroupState.SUCCEEDED and group.state != GroupState.SUCCEEDED:
                self._report_finished(after)

    def _report_finished(self, group: LocalGroup) -> None:
        """Every rank this executor launched for the group exited 0 (`after_exit` says SUCCEEDED only
        then, once per launch). A group adopted after a restart has no spec and never gets here: its
        ranks' exit status is unknown, and so is its success."""
        if group.spec is None:
            return
        log.info("job %s g%d: every rank on this node exited 0", group.job, group.generation)
        self._report(RanksFinished(ts=self.clock(), node=self.config.node, job=group.job,
                                   generation=group.generation, ranks=group.spec.ranks))

    def _publish_exit(self, ended: RankExit, stopped: bool = False, tail: str | None = None) -> None:
        """`stopped`: the exit is this executor's own stop on a command, or as its node leaves on
        purpose, which the detector must not read as a fault. `tail`: what a failed rank last wrote."""
        self._rank_times.pop(ended.pid, None)
        self._waiting.discard(ended.pid)
        if self._launched.pop(ended.pid, None) is not None:
            self._reports.forget(ended.pid)
        event = WorkerExited(
            ts=self.clock(), node=self.config.node, job=ended.job, rank=ended.rank,
            world_size=ended.world_size, generation=ended.generation, pid=ended.pid,
            exit_code=ended.exit_code, signal=ended.signal, reason=ended.reason, stopped=stopped,
            output_tail=tail,
        )
        self._send(self.kafka.topics.worker, event, key=ended.job)
        metrics.RANK_EXITS.labels("clean" if ended.clean else "unknown" if ended.reason else "failed").inc()

    def _ack(self, command: Command, status: AckStatus, *, reason: str | None = None,
             elapsed_s: float | None = None) -> None:
        self._send_ack(command.id, command.job, command.generation, status, reason=reason,
                       elapsed_s=elapsed_s)

    def _send_ack(self, command_id: str, job: str, generation: int, status: AckStatus, *,
                  reason: str | None = None, elapsed_s: float | None = None) -> None:
        """Every ack, re-acks and the answer sent at start included, is a signed report (`_report`)."""
        self._report(CommandAcked(
            ts=self.clock(), node=self.config.node, command_id=command_id, job=job,
            generation=generation, status=status, reason=reason, elapsed_s=elapsed_s,
        ))
        metrics.EXECUTOR_ACKS.labels(str(status)).inc()

    def _report(self, report: NodeReport) -> None:
        """Send a report on the acks topic, signed with this node's key for this deployment (unsigned
        when insecure): the coordinator folds only reports their node's key signed for it."""
        report = report.model_copy(update={"deployment": self.kafka.topics.prefix})
        if self.config.node_key is not None:
            report = self.config.node_key.sign(report)
        self._send(self.kafka.topics.acks, report, key=self.config.node)

    def _send(self, topic: str, event: BaseModel, key: str) -> None:
        """Send, or log and count why not: a failed delivery (an earlier one timed out, the queue is
        full) is never a reason to stop applying commands or to stop the ranks."""
        try:
            self.producer.send(topic, event, key=key, block_s=1.0)
        except KafkaError as err:
            metrics.SEND_FAILURES.inc()
            log.error("not delivered to Kafka (%s): %s", topic, err)

    def _flush(self) -> None:
        try:
            self.producer.flush(timeout_s=10.0)
        except KafkaError as err:
            metrics.SEND_FAILURES.inc()
            log.error("Kafka delivery failed: %s", err)

