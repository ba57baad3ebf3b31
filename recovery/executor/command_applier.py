"""The executor's room that applies commands: each is decided (`decide`, then the admission policy),
recorded in the ledger before anything is done, carried out step by step (stop, launch, signal) and
acked, its final answer in the ledger before it is sent (docs/executor.md, "Command flow"). It keeps each
job's group state here (the `GroupState` table).
"""

from __future__ import annotations

import json
import logging
import os
import queue
import signal
import threading
import time
from collections.abc import Callable
from pathlib import Path

from trainmedic.bus.message import Record
from trainmedic.bus.settings import KafkaSettings
from trainmedic.recovery.executor import job_dirs, metrics, owner_file
from trainmedic.recovery.executor.config import ExecutorConfig
from trainmedic.recovery.executor.core import slurm_owner
from trainmedic.recovery.executor.core.admission import Refusal, admit
from trainmedic.recovery.executor.core.decide import Apply, Decision, Reack, Refuse, Skip, Step, decide
from trainmedic.recovery.executor.core.health import bounded
from trainmedic.recovery.executor.core.ledger_state import RecordedAck
from trainmedic.recovery.executor.core.rank_env import rank_env
from trainmedic.recovery.executor.core.reports import LaunchedRank
from trainmedic.recovery.executor.core.restart import Leftovers, interrupted_answer, unanswered
from trainmedic.recovery.executor.core.state import GroupState, LocalGroup, after_exit, fenced_at
from trainmedic.recovery.executor.health_check import HealthProbe, argv_of
from trainmedic.recovery.executor.launcher import proc_stat
from trainmedic.recovery.executor.ledger import Ledger
from trainmedic.recovery.executor.node_producer import NodeProducer
from trainmedic.recovery.executor.rank_reporter import RankReporter
from trainmedic.recovery.executor.supervisor import RankExit, Supervisor
from trainmedic.recovery.key_folders import KeyFolder
from trainmedic.runtime import reform
from trainmedic.runtime.env import WorkerEnv
from trainmedic.schemas import AckStatus, Command, CommandAcked, DeadLettered, encode
from trainmedic.schemas.commands import CommandAction

# How long a restart waits for the ranks that reported a failure to say they wait to re-form: a
# survivor under `Runtime.run` saves its snapshot and leaves its broken group first (an HSDP rank on
# two busy cores: over 0.8 s); a restart that came before stopped every survivor (issue 47's CI).
ON_ITS_WAY_S = 3.0

log = logging.getLogger(__name__)

ANSWER_MARGIN_S = 5.0  # a health check ends this long before its deadline, for its answer to get there


class CommandApplier:
    """Applies the commands of one node; `ledger` is set by the executor's `run` before the first."""

    def __init__(self, config: ExecutorConfig, kafka: KafkaSettings, producer: NodeProducer,
                 supervisor: Supervisor, reporter: RankReporter, *, clock: Callable[[], float]) -> None:
        self.config = config
        self._topics = kafka.topics
        self._producer = producer
        self._supervisor = supervisor
        self._reporter = reporter
        self._clock = clock
        self.groups: dict[str, LocalGroup] = {}
        self.ledger: Ledger | None = None
        self._keys = (None if config.trusted is None or config.keys_dir is None
                      else KeyFolder(config.keys_dir, config.trusted))  # picks up rotated keys
        self._probe = HealthProbe(argv_of(config.health_check) if config.health_check else None)
        self._checking: set[str] = set()  # ids of the health checks running
        self._checked: queue.SimpleQueue[tuple[Command, RecordedAck]] = queue.SimpleQueue()

    def take_over(self, found: Leftovers) -> None:
        """After a previous executor (leftovers.py): answer the command it was applying, send the newest
        answer again, and take each job's generation from the ledger, running if its ranks were adopted."""
        ledger = self.ledger
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

    def fold_exit(self, ended: RankExit, still_alive: int) -> LocalGroup | None:
        """One rank ended on its own; `still_alive` of its job's ranks have not (yet) been folded. The
        group, where this exit made it succeed."""
        group = self.groups.get(ended.job)
        if group is None or group.generation != ended.generation:
            return None
        after = self.groups[ended.job] = after_exit(group, ended.clean, still_alive)
        return after if after.state == GroupState.SUCCEEDED and group.state != GroupState.SUCCEEDED else None

    def dead_letter(self, letter: DeadLettered) -> None:
        """Read past a command that cannot be applied: its offset in the ledger, the letter on the dlq."""
        ledger, where = self.ledger, (letter.source_topic, letter.partition)
        if ledger.state.positions.get(where, 0) <= letter.offset:
            ledger.record(topic=letter.source_topic, partition=letter.partition, offset=letter.offset)
        self._producer.send(self._topics.dlq, letter, key=letter.source_topic)

    def apply(self, item: Record) -> None:
        """Decide one command and do what the decision says; its offset is in the ledger either way."""
        ledger = self.ledger
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
            now=self._clock(), freshness_s=self.config.freshness_s, group=group, applied=ledger.state.applied,
            answers=ledger.state.answers, epoch=ledger.state.epoch, deployment=self._topics.prefix,
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
        if Step.HEALTH_CHECK in decision.steps:
            ledger.record(**where)  # its offset only: a check is no job's command, and may run again
            self._check(command)
            return
        placement = _placement(command) if Step.LAUNCH in decision.steps else None
        ledger.record(**where, command_id=command.id, job=command.job, generation=command.generation,
                      applied=True, action=command.action, epoch=command.epoch,
                      ranks=command.worker.ranks if command.worker is not None else None, placement=placement)
        self._carry_out(command, decision, group, placement)

    def _check(self, command: Command) -> None:
        """Accept a health check and run the probe in a thread of its own (the ranks' commands and exits
        are not held up for it), for at most `health_check_timeout_s`, less when its deadline is
        nearer; `finish_checks` answers it. A re-send while it runs is not run twice."""
        if command.id in self._checking:
            log.info("health check %s: running already", command.id)
            return
        timeout_s = self.config.health_check_timeout_s
        if command.deadline is not None:  # answer in time: the coordinator fails a check past it
            timeout_s = max(1.0, min(timeout_s, command.deadline - self._clock() - ANSWER_MARGIN_S))
        log.info("health check %s: %s, for at most %.0f s", command.id,
                 self.config.health_check or "the built-in probe", timeout_s)
        self._ack(command, AckStatus.ACCEPTED)
        self._checking.add(command.id)
        threading.Thread(target=self._run_check, args=(command, timeout_s), name="health-check",
                         daemon=True).start()

    def _run_check(self, command: Command, timeout_s: float) -> None:
        """The probe's verdict, queued for `finish_checks` whatever happens: an exception nobody foresaw
        fails the check, saying what, rather than end the thread and leave the check running forever
        (every re-send answered "running already", the node isolated at the deadline)."""
        started = time.monotonic()
        try:
            verdict = self._probe.run(timeout_s)
            status, reason = (AckStatus.DONE if verdict.ok else AckStatus.FAILED), verdict.reason
        except Exception as err:
            log.exception("health check %s: the probe failed", command.id)
            status = AckStatus.FAILED
            reason = bounded(f"the health check failed: {type(err).__name__}: {err}")
        self._checked.put((command, RecordedAck(status, reason, time.monotonic() - started)))

    def finish_checks(self) -> None:
        """Answer the health checks that ended: on the command loop's thread, whose the ledger is."""
        while True:
            try:
                command, answer = self._checked.get_nowait()
            except queue.Empty:
                return
            self._checking.discard(command.id)
            level = logging.INFO if answer.status == AckStatus.DONE else logging.WARNING
            log.log(level, "health check %s: %s (%s)", command.id, answer.status, answer.reason)
            self._answer(command, answer)

    def _admitted(self, command: Command, decision: Decision) -> Decision:
        """`decision`, unless it launches ranks whose command the admission policy does not allow:
        then a refusal naming the rule, before anything (a stop included) is done."""
        if not isinstance(decision, Apply) or Step.LAUNCH not in decision.steps:
            return decision
        refusal = admit(self.config.admission, command.worker)
        if refusal is None and self.config.slurm_owner_file is not None:
            why = slurm_owner.refusal(command.job, *owner_file.read(self.config))
            refusal = None if why is None else Refusal("slurm_owner", why)
        if refusal is None:
            return decision
        metrics.ADMISSION_REFUSALS.labels(refusal.rule).inc()
        return Refuse(str(refusal))

    def _carry_out(self, command: Command, decision: Apply, group: LocalGroup | None,
                   placement: str | None) -> None:
        """`placement`: the command's signed placement as JSON, for its ranks' worker_start and exits."""
        log.info("command %s: %s job %s g%d: %s", command.id, command.action, command.job,
                 command.generation, decision.note)
        self._ack(command, AckStatus.ACCEPTED)
        self._producer.flush()
        started = time.monotonic()
        group = fenced_at(group or LocalGroup(command.job, command.generation), command.generation)
        kept = self._survivors(command)
        try:
            for step in decision.steps:
                group = self._run_step(step, command, group, kept, placement)
        except (OSError, RuntimeError, ValueError, TypeError) as err:  # e.g. an argv execve refuses
            self.groups[command.job] = group
            log.error("command %s failed: %s", command.id, err)
            self._answer(command, RecordedAck(AckStatus.FAILED, str(err), time.monotonic() - started))
            return
        self.groups[command.job] = group
        self._answer(command, RecordedAck(AckStatus.DONE, None, time.monotonic() - started))

    def _answer(self, command: Command, answer: RecordedAck) -> None:
        """The final ack, written to the ledger before it is sent: a redelivery is answered with it."""
        self.ledger.record_answer(command.id, answer)
        self._ack(command, AckStatus(answer.status), reason=answer.reason, elapsed_s=answer.elapsed_s)

    def _run_step(self, step: Step, command: Command, group: LocalGroup, kept: dict[int, int],
                  placement: str | None = None) -> LocalGroup:
        """One step of a command; `kept` (pid -> local rank): ranks re-formed in place, neither
        stopped nor started again."""
        began = time.monotonic()
        if step == Step.STOP:
            group = group.to(GroupState.STOPPING)
            for ended in self._supervisor.stop(command.job, self.config.stop_grace_s, keep=kept):
                self._reporter.publish_exit(ended, stopped=True)
            metrics.RECOVERY_PHASE.labels("stop").observe(time.monotonic() - began)
            return group.to(GroupState.STOPPED)
        if step == Step.LAUNCH:
            spec = command.worker
            new = [local_rank for local_rank in range(len(spec.ranks)) if local_rank not in kept.values()]
            envs = [self._rank_env(command, local_rank) for local_rank in new]
            some = spec.model_copy(update={"ranks": tuple(spec.ranks[i] for i in new)})
            job_dir = self.config.job_dir(command.job, spec.submission)
            pids = (self._supervisor.launch(command.job, command.generation, some, envs, job_dir)
                    if new else [])
            launched = time.monotonic()
            for local_rank, pid in zip(new, pids, strict=True):
                rank = LaunchedRank(command.job, command.generation, spec.ranks[local_rank], spec.world_size,
                                    local_rank, spec.failure.hang_floor_s, spec.submission, placement)
                self._reporter.started(pid, rank, launched)
            for pid, local_rank in kept.items():
                self._keep(command, pid, local_rank, launched, placement)
            metrics.RECOVERY_PHASE.labels("launch").observe(launched - began)
            if new:  # behind the command: snapshots may be many GB, and the ranks train meanwhile
                threading.Thread(target=self._prune, args=(job_dir,), name="prune", daemon=True).start()
            return group.to(GroupState.RUNNING, spec=spec)
        sent = self._supervisor.signal(command.job, signal.SIGUSR1)
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
        deadline = time.monotonic() + ON_ITS_WAY_S  # (one that ended is reaped at the loop's next turn)
        while time.monotonic() < deadline and any(
                self._reporter.on_its_way(pid) and _running(pid)
                for pid in self._supervisor.pids(command.job).values()):
            time.sleep(0.02)
        kept = {}
        for rank, pid in self._supervisor.pids(command.job).items():
            launched = self._reporter.launched_as(pid)
            if (self._reporter.is_waiting(pid) and launched is not None
                    and launched.generation < command.generation
                    and launched.world_size == spec.world_size and rank in spec.ranks
                    and launched.submission == spec.submission):
                kept[pid] = spec.ranks.index(rank)
        return kept

    def _keep(self, command: Command, pid: int, local_rank: int, now: float, placement: str | None) -> None:
        """Name the next generation to a rank kept alive: its contract in the job's directory, where
        it waits; from now on its reports are about that generation."""
        launched = self._reporter.launched_as(pid)
        self._reporter.kept(pid, command.generation, now, placement)  # before its contract: it may be quick
        job_dirs.put(self.config.job_dir(command.job, command.worker.submission), reform.REFORM_DIR,
                     reform.file_name(launched.rank),
                     json.dumps(self._contract(command, local_rank).to_env()))
        self._supervisor.regenerate(command.job, pid, command.generation)
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
            node_address=self.config.data_plane.address if self.config.data_plane else None,
        )

    def _rank_env(self, command: Command, local_rank: int) -> dict[str, str]:
        return rank_env(os.environ, self.config.admission.rank_env, self._reporter.channel(command.job),
                        self._contract(command, local_rank).to_env(), job=command.worker.env,
                        node=self.config.data_plane.rank_env() if self.config.data_plane else None)

    def _ack(self, command: Command, status: AckStatus, *, reason: str | None = None,
             elapsed_s: float | None = None) -> None:
        self._send_ack(command.id, command.job, command.generation, status, reason=reason,
                      elapsed_s=elapsed_s)

    def _send_ack(self, command_id: str, job: str, generation: int, status: AckStatus, *,
                 reason: str | None = None, elapsed_s: float | None = None) -> None:
        """Every ack, re-acks and the answer sent at start included, is a signed node report."""
        self._producer.report(CommandAcked(
            ts=self._clock(), node=self.config.node, command_id=command_id, job=job,
            generation=generation, status=status, reason=reason, elapsed_s=elapsed_s,
        ))
        metrics.EXECUTOR_ACKS.labels(str(status)).inc()


def _placement(command: Command) -> str | None:
    """The coordinator's signed placement of the command's ranks as JSON (no secret of the command's:
    `Placement`), for their worker_start and exits; None from a coordinator that signs none."""
    if command.placement is None or command.placement.signature is None:
        return None
    return encode(command.placement).decode("utf-8")


def _running(pid: int) -> bool:
    """`pid` is alive (a zombie, ended and not reaped yet, is not)."""
    stat = proc_stat(pid)
    return stat is not None and stat[0] not in ("Z", "X")
