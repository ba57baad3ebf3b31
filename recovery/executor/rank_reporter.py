"""The executor's room that tells what its ranks do: their exits on telemetry.worker (a failed rank's last
output with it), what they report through their job's socket (report_server.py: checked, stamped, and
the phases of a start timed), and `ranks_finished` once a group's ranks all exited 0. It knows who each
rank process is, for its reports to be checked against, and which ranks wait alive to re-form.
"""

from __future__ import annotations

import logging
import signal
import time
from collections.abc import Callable
from dataclasses import replace

from trainmedic.bus.outbox import Outbox
from trainmedic.bus.producer import EventProducer
from trainmedic.bus.settings import KafkaSettings
from trainmedic.recovery.executor import metrics
from trainmedic.recovery.executor.config import ExecutorConfig
from trainmedic.recovery.executor.core.phases import RankTimes, rank_phases
from trainmedic.recovery.executor.core.reports import LaunchedRank, Report
from trainmedic.recovery.executor.core.restart import Leftovers
from trainmedic.recovery.executor.core.state import LocalGroup
from trainmedic.recovery.executor.node_producer import NodeProducer
from trainmedic.recovery.executor.report_server import ReportServer
from trainmedic.recovery.executor.report_sockets import socket_folder
from trainmedic.recovery.executor.supervisor import RankExit, Supervisor
from trainmedic.runtime.report_channel import SOCKET_ENV
from trainmedic.schemas import RanksFinished, WorkerExited
from trainmedic.schemas.telemetry import WorkerFailed, WorkerWaiting

log = logging.getLogger(__name__)


class RankReporter:
    """Reports this node's ranks: `start()` serves their sockets until `close()`. Its rank reports go
    through an outbox of their own (dropped and counted, never waited for); exits and `ranks_finished`
    through the executor's `NodeProducer`."""

    def __init__(self, config: ExecutorConfig, kafka: KafkaSettings, producer: NodeProducer,
                 supervisor: Supervisor, *, clock: Callable[[], float]) -> None:
        self._config = config
        self._topics = kafka.topics
        self._producer = producer
        self._supervisor = supervisor
        self._clock = clock
        self._launched: dict[int, LaunchedRank] = {}  # by pid: who each rank's reports must say it is
        self._rank_times: dict[int, RankTimes] = {}  # by pid: the phases of its start (core/phases.py)
        self._waiting: set[int] = set()  # pids of ranks waiting alive to re-form (`Runtime.run`)
        self._failed: set[int] = set()  # pids that reported a failure since: waiting, or ending, soon
        self._outbox = Outbox(
            EventProducer(kafka, client_id=kafka.topics.owned(f"executor-{config.node}-reports")),
            what="rank reports")
        self._server = ReportServer(socket_folder(config.state_dir), node=config.node,
                                    resolve=self._launched.get, publish=self._publish_report, clock=clock,
                                    on_tick=self._outbox.poll)

    def start(self) -> None:
        self._server.start()

    def close(self) -> None:
        self._server.close()
        self._outbox.flush(5.0)

    def unlisten(self, job: str) -> None:
        """`job` has no rank here any more: its socket goes."""
        self._server.unlisten(job)

    def channel(self, job: str) -> dict[str, str]:
        """Where the in-band hook of a rank of `job` reports: the job's socket of this executor, in a
        folder only the job's group may enter (no broker, no credentials)."""
        user = self._supervisor.trees.users.of(job)
        return {SOCKET_ENV: str(self._server.listen(job, None if user is None else user.gid))}

    def started(self, pid: int, rank: LaunchedRank, at: float) -> None:
        """A rank launched at `at` (monotonic): its reports are checked against `rank`, its start timed."""
        self._launched[pid] = rank
        self._rank_times[pid] = RankTimes(at)

    def launched_as(self, pid: int) -> LaunchedRank | None:
        return self._launched.get(pid)

    def is_waiting(self, pid: int) -> bool:
        """The rank of `pid` said it waits alive to re-form, and nothing since."""
        return pid in self._waiting

    def on_its_way(self, pid: int) -> bool:
        """The rank of `pid` reported a failure and has not said it waits yet: one under `Runtime.run`
        saves its snapshot and leaves its broken group first (`Runtime._reform`), then says so."""
        return pid in self._failed

    def kept(self, pid: int, generation: int, at: float, placement: str | None = None) -> None:
        """The rank of `pid` was kept alive into `generation` at `at` by the command whose signed
        placement (as JSON) is `placement`: its reports from now on are about that generation, and its
        new start is timed."""
        self._launched[pid] = replace(self._launched[pid], generation=generation, placement=placement)
        self._waiting.discard(pid)
        self._failed.discard(pid)
        self._rank_times[pid] = RankTimes(at)

    def take_over(self, found: Leftovers, placements: dict[str, tuple[int, str]] | None = None) -> None:
        """What a previous executor left: the adopted ranks keep reporting (their place among local ranks
        is not recorded), with the placement of their generation where the ledger has it (`placements`,
        `LedgerState.placements`); those killed are reported as this executor's own stop; those that
        ended unwatched, with their exit status unknown."""
        placements = placements or {}
        for rank in found.adopt:
            placed = placements.get(rank.job)
            self._launched[rank.pid] = LaunchedRank(
                rank.job, rank.generation, rank.rank, rank.world_size,
                placement=placed[1] if placed is not None and placed[0] == rank.generation else None)
            self.channel(rank.job)
        for rank, _ in found.kill:  # ranks the ledger says must not run: this executor's own stop
            self.publish_exit(RankExit(rank.job, rank.generation, rank.rank, rank.world_size, rank.pid,
                                       None, signal.SIGKILL), stopped=True)
        unknown = "ended while no executor watched it: exit status unknown"
        for rank in found.ended:
            self.publish_exit(RankExit(rank.job, rank.generation, rank.rank, rank.world_size, rank.pid,
                                       None, None, unknown))

    def report_finished(self, group: LocalGroup) -> None:
        """Every rank this executor launched for the group exited 0 (`after_exit` says SUCCEEDED only
        then, once per launch). A group adopted after a restart has no spec and never gets here: its
        ranks' exit status is unknown, and so is its success."""
        if group.spec is None:
            return
        log.info("job %s g%d: every rank on this node exited 0", group.job, group.generation)
        self._producer.report(RanksFinished(ts=self._clock(), node=self._config.node, job=group.job,
                                            generation=group.generation, ranks=group.spec.ranks))

    def publish_exit(self, ended: RankExit, stopped: bool = False, tail: str | None = None) -> None:
        """`stopped`: the exit is this executor's own stop on a command, or as its node leaves on
        purpose, which the detector must not read as a fault. `tail`: what a failed rank last wrote."""
        self._rank_times.pop(ended.pid, None)
        self._waiting.discard(ended.pid)
        self._failed.discard(ended.pid)
        launched = self._launched.get(ended.pid)
        if launched is not None:
            self._server.forget(ended.pid, launched)  # first: the server knows the pid at every moment
            del self._launched[ended.pid]
        event = WorkerExited(
            ts=self._clock(), node=self._config.node, job=ended.job, rank=ended.rank,
            world_size=ended.world_size, generation=ended.generation, pid=ended.pid,
            exit_code=ended.exit_code, signal=ended.signal, reason=ended.reason, stopped=stopped,
            output_tail=tail,
            placement=launched.placement if launched is not None and launched.generation == ended.generation
            else None,
        )
        self._producer.send(self._topics.worker, event, key=ended.job)
        metrics.RANK_EXITS.labels("clean" if ended.clean else "unknown" if ended.reason else "failed").inc()

    def _publish_report(self, report: Report) -> None:
        """A rank's report, checked and stamped (report_server.py's thread): on telemetry.worker, or
        dropped and counted, never waited for. The phases of its rank's start it ends are timed. A
        rank waiting to re-form is noted, not published: the next restart keeps it, unless it reports
        anything after (an error of its own: it does not wait, and keeping it made the restart a
        no-op for it)."""
        if isinstance(report, WorkerWaiting):
            self._waiting.add(report.pid)
            self._failed.discard(report.pid)
            return
        self._waiting.discard(report.pid)  # it said more since: it is not waiting (a restart stops it)
        if isinstance(report, WorkerFailed):
            self._failed.add(report.pid)
        self._outbox.send(self._topics.worker, report, key=report.job)
        self._outbox.poll()
        times = self._rank_times.get(report.pid)
        for phase, seconds in rank_phases(times, report, time.monotonic()) if times is not None else ():
            metrics.RECOVERY_PHASE.labels(phase).observe(seconds)
