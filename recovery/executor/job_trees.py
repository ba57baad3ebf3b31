"""Each job's process tree on this node, and its end: a cgroup (job_cgroup.py) and a launcher
(launcher.py) of its own, made at the job's first launch here and ended, every process in it killed,
with its last rank; and the reaping of whatever a job's processes leave to the executor, their
subreaper (docs/executor.md, "Containment: a cgroup per job").
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Collection, Mapping

from trainmedic.recovery.executor.job_cgroup import JobCgroups
from trainmedic.recovery.executor.launcher import JobLauncher, Zygote, become_subreaper, proc_stat, proc_uid
from trainmedic.recovery.executor.rank_users import JobUids, OneUser

log = logging.getLogger(__name__)

EXECUTORS_OWN = OneUser(None)  # every rank as the executor's own user
REAP_EVERY_S = 1.0  # how often /proc is read for what the jobs' processes left behind


class JobTrees:
    """The launchers and cgroups of every job on this node, the launchers forked by one zygote
    (`warm`: it imports torch first, so that every launcher, and every rank it forks, has it)."""

    def __init__(self, *, warm: bool, env: Mapping[str, str] | None = None,
                 users: OneUser | JobUids = EXECUTORS_OWN, cgroups: JobCgroups | None = None) -> None:
        if not become_subreaper():
            raise OSError("this system cannot make the executor its ranks' subreaper (Linux 3.4+ can)")
        self.warm = warm
        self._env = dict(env) if env is not None else None
        self.users = users
        self._cgroups = cgroups
        self._launchers: dict[str, JobLauncher] = {}
        self._zygote = self._new_zygote()
        self._reaped_at = 0.0

    def _new_zygote(self) -> Zygote:
        return Zygote(warm=self.warm, env=self._env)

    def launcher(self, job: str) -> JobLauncher:
        """The job's launcher: the one it has, else a new one forked by the zygote (a new zygote
        where it has died) and moved into the job's cgroup before it forks anything."""
        launcher = self._launchers.get(job)
        if launcher is not None and launcher.alive():
            return launcher
        if launcher is not None:
            self._launchers.pop(job).close()
        if not self._zygote.alive():
            self._zygote.close()
            self._zygote = self._new_zygote()
        launcher = self._zygote.spawn(self.users.of(job))
        if self._cgroups is not None:
            try:
                self._cgroups.create(job)
                self._cgroups.add(job, launcher.pid)
            except OSError:
                launcher.close()
                raise
            launcher.in_job = lambda pid: self._cgroups.holds(job, pid)
        self._launchers[job] = launcher
        return launcher

    def end(self, job: str) -> None:
        """The job has no rank left here: its launcher and every process left in its cgroup killed."""
        if self._cgroups is not None:
            self._cgroups.kill(job)
        launcher = self._launchers.pop(job, None)
        if launcher is not None:
            launcher.close()

    def sweep(self, keep: Collection[str]) -> None:
        """At start: kill the cgroups of jobs (of a previous executor) with no rank to adopt."""
        if self._cgroups is None:
            return
        for job in self._cgroups.jobs():
            if job not in keep:
                log.info("job %s: killing what a previous executor's job left in its cgroup", job)
                self._cgroups.kill(job)

    def servers(self) -> set[int]:
        return {self._zygote.pid, *(launcher.pid for launcher in self._launchers.values())}

    def reap_orphans(self, known: Collection[int], force: bool = False) -> int:
        """Reap the zombies a job's processes left to the executor (their subreaper): in a job's cgroup,
        or, with no cgroups, of a job's user; never `known` (ranks, launchers) nor another child of
        this process. At most every REAP_EVERY_S unless `force`; returns how many."""
        now = time.monotonic()
        if not force and now - self._reaped_at < REAP_EVERY_S or not self._tells_jobs_apart():
            return 0
        self._reaped_at = now
        me, skip, reaped = os.getpid(), {*known, *self.servers()}, 0
        for entry in os.scandir("/proc"):
            if not entry.name.isdigit() or int(entry.name) in skip:
                continue
            pid = int(entry.name)
            stat = proc_stat(pid)
            if stat is None or stat[0] != "Z" or int(stat[1]) != me or not self._of_a_job(pid):
                continue
            try:
                os.waitpid(pid, os.WNOHANG)
            except ChildProcessError:
                continue
            reaped += 1
        if reaped:
            log.info("reaped %d processes left behind by ranks", reaped)
        return reaped

    def _tells_jobs_apart(self) -> bool:
        """Whether a zombie can be told to be a job's: by its cgroup, or by its user (not ours)."""
        return self._cgroups is not None or self.users.apart

    def _of_a_job(self, pid: int) -> bool:
        if self._cgroups is not None:
            return self._cgroups.within(pid)
        uid = proc_uid(pid)
        return uid is not None and self.users.owns(uid)

    def close(self) -> None:
        """Every job ended (at the executor's stop, once its ranks are), the zygote closed."""
        for job in list(self._launchers):
            self.end(job)
        self._zygote.close()
        if self._cgroups is not None:
            self._cgroups.close()
