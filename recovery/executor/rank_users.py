"""Which Unix user a job's ranks run as on this node (docs/executor.md, "One uid per job"): every job
the one `run_as` user (`OneUser`), or each job a uid of its own from a range (`JobUids`), as
systemd's DynamicUser does, so that the ranks of two jobs can neither ptrace nor read each other.
"""

from __future__ import annotations

import grp
import hashlib
import json
import logging
import os
import pwd
from dataclasses import dataclass
from pathlib import Path

from trainmedic.common.errors import ConfigError
from trainmedic.recovery.executor import leftovers
from trainmedic.recovery.executor.job_dirs import RankUser

log = logging.getLogger(__name__)

LOWEST = 1000  # below it: system users, never a job's
HIGHEST = 2**31 - 2  # uid_t's largest that is not (uid_t)-1


@dataclass(frozen=True)
class OneUser:
    """Every job's ranks as `user` (run_as), or as the executor's own user when None."""

    user: RankUser | None

    def of(self, job: str) -> RankUser | None:
        return self.user

    @property
    def apart(self) -> bool:
        """Whether a job's processes can be told from the executor's by their uid."""
        return self.user is not None and self.user.uid != os.geteuid()

    def owns(self, uid: int) -> bool:
        """Whether a process of `uid` is some job's (and not the executor's own)."""
        return self.apart and uid == self.user.uid


class JobUids:
    """A uid of its own for each job on this node, from [first, last], its group the same number,
    neither in /etc/passwd nor /etc/group (users of a directory service are not seen: keep the
    range out of theirs). A job keeps its uid here for good (its files on this node stay its
    own; `path` records who has which, 0600), so no uid ever serves two jobs. A job's uid is the
    same on every node whose range is the same, unless another job had taken it there (logged):
    a checkpoint directory on a shared file system is then written by two uids."""

    def __init__(self, first: int, last: int, path: Path) -> None:
        self.first, self.last, self._path = first, last, path
        self._jobs: dict[str, int] = _load(path)

    @classmethod
    def parse(cls, text: str, path: Path) -> JobUids:
        """`FIRST-LAST` (e.g. 61184-65519, systemd's range for dynamic users); a ConfigError that
        says what is wrong, a user of /etc/passwd in the range included."""
        first, _, last = text.partition("-")
        if not (first.isdigit() and last.isdigit() and LOWEST <= int(first) <= int(last) <= HIGHEST):
            raise ConfigError(f"job_uids {text!r} is not FIRST-LAST with {LOWEST} <= FIRST <= LAST <= "
                              f"{HIGHEST} (e.g. 61184-65519)")
        taken = [entry for entry in pwd.getpwall() if int(first) <= entry.pw_uid <= int(last)]
        if taken:
            raise ConfigError(f"job_uids {text}: uid {taken[0].pw_uid} is user {taken[0].pw_name}'s; a "
                              "job's ranks would share it. Choose a range no user of /etc/passwd is in")
        groups = [entry for entry in grp.getgrall() if int(first) <= entry.gr_gid <= int(last)]
        if groups:
            raise ConfigError(f"job_uids {text}: gid {groups[0].gr_gid} is group {groups[0].gr_name}'s, and "
                              "a job's ranks take their uid as their group. Choose a range no group of "
                              "/etc/group is in")
        return cls(int(first), int(last), path)

    def of(self, job: str) -> RankUser:
        uid = self._jobs.get(job)
        if uid is None:
            uid = self._allocate(job)
        return RankUser(f"trainmedic-job-{uid}", uid, uid)

    apart = True

    def owns(self, uid: int) -> bool:
        return self.first <= uid <= self.last

    def _allocate(self, job: str) -> int:
        size = self.last - self.first + 1
        if len(self._jobs) >= size:
            raise OSError(f"every uid of job_uids {self.first}-{self.last} is some job's on this node: "
                          "widen the range (--job-uids)")
        taken = set(self._jobs.values())
        preferred = int.from_bytes(hashlib.sha256(job.encode()).digest()[:8], "big") % size
        uid = next(self.first + (preferred + i) % size for i in range(size)
                   if self.first + (preferred + i) % size not in taken)
        if uid != self.first + preferred:
            log.warning(
                "job %s runs as uid %d here, not %d (another job's): on a file system shared with other "
                "nodes, its checkpoints are written by two uids", job, uid, self.first + preferred)
        self._jobs[job] = uid
        leftovers.save(self._path, self._jobs)
        return uid


def _load(path: Path) -> dict[str, int]:
    try:
        return {str(job): int(uid) for job, uid in json.loads(path.read_text("utf-8")).items()}
    except FileNotFoundError:
        return {}
