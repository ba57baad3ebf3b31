"""Rank processes on this node: launch (warm or cold), signal, stop, adopt after a restart, and notice
when they end (docs/executor.md, "Processes", "Restarts: adopting the ranks").
"""

from __future__ import annotations

import errno
import logging
import os
import signal
import time
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from pathlib import Path

from trainmedic.recovery.executor import job_dirs, leftovers
from trainmedic.recovery.executor.core.output_tail import READ_BYTES, output_tail
from trainmedic.recovery.executor.core.restart import RecordedRank
from trainmedic.recovery.executor.job_trees import JobTrees
from trainmedic.recovery.executor.launcher import LauncherFailed
from trainmedic.recovery.executor.rank_logs import log_name
from trainmedic.schemas import WorkerSpec

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class RankExit:
    """How one rank process ended: `exit_code` when it exited, `signal` when a signal killed it,
    neither (and `reason` says why) when that cannot be known."""

    job: str
    generation: int
    rank: int
    world_size: int
    pid: int
    exit_code: int | None
    signal: int | None
    reason: str | None = None
    tail: str | None = None  # a failed rank's last output (`core/output_tail.py`); None when clean or unknown

    @property
    def clean(self) -> bool:
        return self.exit_code == 0


@dataclass(slots=True)
class RankProcess:
    job: str
    generation: int
    rank: int
    world_size: int
    pid: int
    log_fd: int | None = None  # its log as the executor opened it (`job_dirs.open_log`); None if adopted
    start: int | None = None  # process start time (/proc/PID/stat), to tell a reused pid apart
    adopted: bool = False  # started by a previous executor: not our child, polled in /proc


class Supervisor:
    """Owns the rank processes of every job on this node, each job's run as its user (`trees.users`)
    and forked by its launcher in its own tree (`trees`; by default launchers as the executor's user
    that exec every command, no cgroups); records them in `registry` when given, and tells `on_end`
    of each job whose last rank here ended. Below `allowed_dirs`, it makes a submission's checkpoint
    directory its ranks' user's."""

    def __init__(self, registry: Path | None = None, trees: JobTrees | None = None,
                 on_end: Callable[[str], None] = lambda job: None,
                 allowed_dirs: tuple[str, ...] = ()) -> None:
        self._ranks: dict[str, list[RankProcess]] = {}
        self._dirs = allowed_dirs  # where the executor may make a job's checkpoint directory
        self._registry = registry
        self._trees = trees
        self._on_end = on_end

    @property
    def trees(self) -> JobTrees:
        if self._trees is None:
            self._trees = JobTrees(warm=False)
        return self._trees

    def use_trees(self, trees: JobTrees) -> None:
        """Launch ranks in `trees` from now on."""
        self._trees = trees

    def _record(self) -> None:
        """Keep the registry of live ranks current (see leftovers.py)."""
        if self._registry is None:
            return
        leftovers.save(self._registry, [
            {"pid": p.pid, "start": p.start, "job": p.job,
             "generation": p.generation, "rank": p.rank, "world_size": p.world_size}
            for procs in self._ranks.values() for p in procs
        ])

    def launch(
        self, job: str, generation: int, spec: WorkerSpec, envs: list[Mapping[str, str]], job_dir: Path,
    ) -> list[int]:
        """Start one process per entry of `envs` (one per local rank) with `job_dir` as its HOME and
        its output in `job_dir`/logs, the directory made the user's first; returns their pids.

        Each rank is recorded as soon as it started, so an executor that dies in between leaves
        none unrecorded for the next one. If one cannot start, the ones already started are
        killed and the error re-raised. Ranks run in `spec.workdir` when it is set (an absolute path,
        see decide.py); one that is not a directory here fails the launch before any rank starts.
        """
        if spec.workdir is not None and not os.path.isdir(spec.workdir):
            # An errno the coordinator reads as "the job cannot run" (blame.CANNOT_RUN): the job's
            # error, never its node's, whichever node it was planned on.
            raise NotADirectoryError(
                errno.ENOTDIR, f"workdir {spec.workdir} is not a directory on this node: no rank started")
        user = self.trees.users.of(job)
        log_dir = job_dirs.prepare(job_dir, user)
        checkpoints = job_dirs.checkpoints(spec.checkpoint_dir, job, spec.submission or "")
        if user is not None and checkpoints is not None and (os.path.isabs(checkpoints) or spec.workdir):
            job_dirs.prepare_checkpoints(os.path.join(spec.workdir or "/", checkpoints), self._dirs, user)
        named = {} if user is None else {"USER": user.name, "LOGNAME": user.name}
        started: list[RankProcess] = []
        try:
            for rank, given in zip(spec.ranks, envs, strict=True):
                env = {**given, **named, "HOME": str(job_dir), "PYTHONNOUSERSITE": "1"}
                path = log_dir / log_name(generation, rank)
                # Made and kept open here: its tail is read from this descriptor, never from the name,
                # which the rank may make a link to a secret, or a FIFO, before it fails.
                log_fd = job_dirs.open_log(path, user)
                try:
                    pid = self._start(job, generation, rank, spec.command, env, log_fd, spec.workdir)
                except OSError:
                    os.close(log_fd)
                    raise
                proc = RankProcess(job, generation, rank, spec.world_size, pid, log_fd,
                                   leftovers.start_time(pid))
                started.append(proc)
                self._ranks.setdefault(job, []).append(proc)
                self._record()
                log.info("job %s g%d: rank %d started%s, pid %d, output in %s", job, generation, rank,
                         " (by a warm launcher)" if self.trees.warm else "", proc.pid, path)
        except OSError:
            for proc in started:
                _kill_group(proc.pid, signal.SIGKILL)
                while (status := _ended(proc.pid)) is None:
                    time.sleep(0.01)
                self._ranks[job].remove(proc)
                self._finish(proc, status)
            if not self._ranks.get(job):
                self._ranks.pop(job, None)
                self._end(job)
            self._record()
            raise
        return [proc.pid for proc in started]

    def adopt(self, ranks: tuple[RecordedRank, ...]) -> None:
        """Supervise ranks a previous executor started (still the same processes): signal, stop
        and notice their end as our own, except that their exit status is unknown."""
        for rank in ranks:
            self._ranks.setdefault(rank.job, []).append(RankProcess(
                rank.job, rank.generation, rank.rank, rank.world_size, rank.pid, start=rank.start,
                adopted=True))
        self._record()

    def _start(self, job: str, generation: int, rank: int, command: tuple[str, ...],
               env: Mapping[str, str], log_fd: int, cwd: str | None) -> int:
        """The pid of a rank started by the job's launcher; a launcher that fails is replaced, once.
        A rank forked warm shows in ps as `trainmedic rank 3 of job JOB g2: COMMAND` (cut to the
        zygote's command line's length)."""
        title = f"trainmedic rank {rank} of job {job} g{generation}"
        warm = self.trees.warm
        try:
            return self.trees.launcher(job).launch(command, env, log_fd, cwd, title, warm=warm)
        except LauncherFailed as err:
            log.warning("job %s: %s; a new launcher starts the rank", job, err)
            return self.trees.launcher(job).launch(command, env, log_fd, cwd, title, warm=warm)

    def alive(self, job: str) -> int:
        """How many rank processes of `job` are not yet known to have ended."""
        return len(self._ranks.get(job, []))

    def jobs(self) -> list[str]:
        """The jobs with a rank process here not yet known to have ended."""
        return [job for job, procs in self._ranks.items() if procs]

    def running(self) -> int:
        """How many rank processes, of every job, are not yet known to have ended."""
        return sum(len(procs) for procs in self._ranks.values())

    def pids(self, job: str) -> dict[int, int]:
        """rank -> pid of the live ranks of `job`."""
        return {proc.rank: proc.pid for proc in self._ranks.get(job, [])}

    def signal(self, job: str, sig: signal.Signals, keep: Collection[int] = ()) -> int:
        """Send `sig` to the group of every live rank of `job` (but the pids in `keep`); returns how
        many got it."""
        sent = 0
        for proc in self._ranks.get(job, []):
            if proc.pid not in keep and _kill_group(proc.pid, sig):
                sent += 1
        return sent

    def regenerate(self, job: str, pid: int, generation: int) -> None:
        """A rank of `job` kept alive across a restart is of `generation` from now on."""
        for proc in self._ranks.get(job, []):
            if proc.pid == pid:
                proc.generation = generation
        self._record()

    def reap(self, only_job: str | None = None) -> list[RankExit]:
        """The ranks (of every job, or of `only_job`) that ended since the last call; never blocks."""
        exits: list[RankExit] = []
        for job, procs in list(self._ranks.items()):
            if only_job is not None and job != only_job:
                continue
            for proc in list(procs):
                if proc.adopted:
                    now = leftovers.start_time(proc.pid)
                    if now != proc.start:
                        procs.remove(proc)
                        exits.append(self._finish_adopted(proc, reused=now is not None))
                    continue
                status = _ended(proc.pid)
                if status is not None:
                    procs.remove(proc)
                    exits.append(self._finish(proc, status))
            if not procs:
                del self._ranks[job]
                self._end(job)
        if exits:
            self._record()
        self.trees.reap_orphans(self._known())
        return exits

    def _end(self, job: str) -> None:
        """No rank of `job` is left here: its tree ends (job_trees.py), and what it held is reaped."""
        self.trees.end(job)
        self.trees.reap_orphans(self._known(), force=True)
        self._on_end(job)

    def _known(self) -> set[int]:
        return {proc.pid for procs in self._ranks.values() for proc in procs}

    def stop(self, job: str, grace_s: float, keep: Collection[int] = ()) -> list[RankExit]:
        """SIGTERM every rank group of `job` but the pids in `keep`, SIGKILL what is left after
        `grace_s`; wait for all of them."""

        def left() -> int:
            return sum(proc.pid not in keep for proc in self._ranks.get(job, []))

        if not left():
            return []
        log.info("job %s: stopping %d ranks (SIGTERM, SIGKILL after %gs)%s", job, left(), grace_s,
                 f", keeping {len(keep)}" if keep else "")
        self.signal(job, signal.SIGTERM, keep)
        exits: list[RankExit] = []
        deadline = time.monotonic() + grace_s
        while left():
            exits.extend(self.reap(job))
            if not left():
                break
            if time.monotonic() >= deadline:
                log.warning("job %s: %d ranks ignored SIGTERM for %gs; SIGKILL", job, left(), grace_s)
                self.signal(job, signal.SIGKILL, keep)
                deadline = float("inf")
            time.sleep(0.05)
        return exits

    def stop_all(self, grace_s: float) -> list[RankExit]:
        exits: list[RankExit] = []
        for job in list(self._ranks):
            exits.extend(self.stop(job, grace_s))
        if self._trees is not None:
            self._trees.close()
        return exits

    @staticmethod
    def _finish(proc: RankProcess, status: int) -> RankExit:
        """Clean up after an ended rank whose pid is not yet reaped, then reap it."""
        _kill_group(proc.pid, signal.SIGKILL)  # whatever the rank left in its group
        os.waitpid(proc.pid, 0)
        code, sig = (status, None) if status >= 0 else (None, -status)
        tail = None
        if proc.log_fd is not None:
            if status != 0:
                tail = read_tail(proc.log_fd, f"job {proc.job} g{proc.generation} rank {proc.rank}")
            os.close(proc.log_fd)
        log.info("job %s g%d: rank %d (pid %d) ended: %s", proc.job, proc.generation, proc.rank,
                 proc.pid, f"exit code {code}" if sig is None else f"signal {signal.Signals(sig).name}")
        return RankExit(proc.job, proc.generation, proc.rank, proc.world_size, proc.pid, code, sig, tail=tail)

    @staticmethod
    def _finish_adopted(proc: RankProcess, reused: bool) -> RankExit:
        """An adopted rank ended: clean up its group; its exit status went to its reaper, not us.
        When its pid already runs another process, that one's group is not ours to kill."""
        if not reused:
            _kill_group(proc.pid, signal.SIGKILL)  # whatever the rank left in its group
        reason = "adopted after an executor restart: not a child of this executor, exit status unknown"
        log.info("job %s g%d: adopted rank %d (pid %d) ended: exit status unknown", proc.job, proc.generation,
                 proc.rank, proc.pid)
        return RankExit(proc.job, proc.generation, proc.rank, proc.world_size, proc.pid, None, None, reason)


def read_tail(log_fd: int, whose: str) -> str | None:
    """What a failed rank last wrote: the end of its log, read from the executor's own descriptor
    (bounded: only the last READ_BYTES, with pread; output_tail.py); None when it cannot be read."""
    try:
        size = os.fstat(log_fd).st_size
        end = os.pread(log_fd, READ_BYTES, max(0, size - READ_BYTES))
    except OSError as err:
        log.warning("%s: its output cannot be read: %s", whose, err)
        return None
    return output_tail(end, whole=size <= READ_BYTES)


def _ended(pid: int) -> int | None:
    """None while `pid` runs; else its status (exit code, or minus the signal), leaving it unreaped."""
    try:
        info = os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
    except ChildProcessError:
        return None
    if info is None:
        return None
    if info.si_code == os.CLD_EXITED:
        return info.si_status
    return -info.si_status


def _kill_group(pgid: int, sig: signal.Signals) -> bool:
    try:
        os.killpg(pgid, sig)
    except ProcessLookupError:
        return False
    except PermissionError:
        log.warning("no permission to signal process group %d", pgid)
        return False
    return True
