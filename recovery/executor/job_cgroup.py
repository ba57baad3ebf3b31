"""A cgroup per job: every process a job's ranks start, daemons included, in one place that the
executor can count, limit and kill at once (docs/executor.md, "Containment: a cgroup per job").

The executor's own tree is `trainmedic-KEY` (KEY: its node and state directory) beside its own cgroup,
in every hierarchy it may use: cgroup v2 (`cgroup.kill`, and `pids.max`/`memory.max` where those
controllers are enabled) and cgroup v1's `pids` and `memory` where they are mounted (a v2 hierarchy
without controllers beside v1's, as on hosts like the project's CI machine). A job's cgroup is
`JOB` in each. Only root may make them: other executors go without, and say so.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import logging
import os
import signal
import time
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger(__name__)

V1_CONTROLLERS = ("pids", "memory")
KILL_ROUNDS = 50  # v1 without cgroup.kill: SIGKILL what the cgroup lists, at most this many times
EMPTY_WAIT_S = 2.0  # how long a kill waits for the cgroup to empty before leaving it for later


@dataclass(frozen=True, slots=True)
class Hierarchy:
    """One mounted hierarchy: where it is mounted, the executor's own cgroup in it, what it is."""

    mount: Path
    own: str  # the executor's cgroup, relative to the mount ("/" at its root)
    controller: str | None  # None for cgroup v2, else the v1 controller ("pids", "memory")

    def base(self, name: str) -> Path:
        return self.mount / self.own.strip("/") / name


def hierarchies(mountinfo: str, own_cgroups: str) -> list[Hierarchy]:
    """The hierarchies a job cgroup goes into: cgroup v2, and v1's `pids` and `memory`, each where
    both /proc/self/mountinfo (`mountinfo`) and /proc/self/cgroup (`own_cgroups`) have it."""
    own_v2, own_v1 = None, {}
    for line in own_cgroups.splitlines():
        number, controllers, path = line.split(":", 2)
        if number == "0" and controllers == "":
            own_v2 = path
        for controller in controllers.split(","):
            own_v1[controller] = path
    found: list[Hierarchy] = []
    for line in mountinfo.splitlines():
        fields = line.split(" ")
        if " - " not in line or len(fields) < 5:
            continue
        after = line.split(" - ", 1)[1].split(" ")
        fstype, options = after[0], after[2] if len(after) > 2 else ""
        mount = Path(fields[4])
        if fstype == "cgroup2" and own_v2 is not None and all(h.controller for h in found):
            found.append(Hierarchy(mount, own_v2, None))
        elif fstype == "cgroup":
            for controller in V1_CONTROLLERS:
                if controller in options.split(",") and controller in own_v1 and not any(
                        h.controller == controller for h in found):
                    found.append(Hierarchy(mount, own_v1[controller], controller))
    return found


class JobCgroups:
    """The executor's tree of job cgroups (see the module's docstring)."""

    def __init__(self, found: list[Hierarchy], key: str, pids_max: int | None = None,
                 memory_max: int | None = None) -> None:
        self.name = f"trainmedic-{key}"
        self._found = found
        self._limits = {"pids": pids_max, "memory": memory_max}
        self.v2 = next((h for h in found if h.controller is None), None)

    @classmethod
    def here(cls, node: str, state_dir: Path, pids_max: int | None = None,
             memory_max: int | None = None) -> JobCgroups | None:
        """This executor's tree, made now; None (and why, logged) where it cannot have one."""
        if os.geteuid() != 0:
            log.warning("no cgroup per job (the executor is not root): a process a rank leaves behind "
                        "in a session of its own can outlive its job")
            return None
        try:
            found = hierarchies(Path("/proc/self/mountinfo").read_text(),
                                Path("/proc/self/cgroup").read_text())
        except OSError as err:
            log.warning("no cgroup per job: %s", err)
            return None
        if not any(h.controller is None for h in found):
            log.warning("no cgroup per job: this host mounts no cgroup v2 hierarchy")
            return None
        digest = hashlib.sha256(str(state_dir.resolve()).encode()).hexdigest()[:8]
        name, usable = f"{node}-{digest}", []
        for hierarchy in found:
            try:
                hierarchy.base(f"trainmedic-{name}").mkdir(mode=0o755, exist_ok=True)
            except OSError as err:
                log.warning("no job cgroups in %s: %s", hierarchy.mount, err)
                continue
            usable.append(hierarchy)
        if not any(h.controller is None for h in usable):
            return None
        tree = cls(usable, name, pids_max, memory_max)
        log.info("a cgroup per job under %s", ", ".join(str(h.base(tree.name)) for h in found))
        return tree

    def _dirs(self, job: str) -> list[Path]:
        return [h.base(self.name) / f"job-{job}" for h in self._found]

    def jobs(self) -> list[str]:
        """The jobs that have a cgroup here (ended or not)."""
        base = self.v2.base(self.name)
        return sorted(entry.name.removeprefix("job-") for entry in base.iterdir()
                      if entry.is_dir() and entry.name.startswith("job-"))

    def create(self, job: str) -> None:
        """The job's cgroup in every hierarchy, with its limits; as it was when it exists."""
        for hierarchy, path in zip(self._found, self._dirs(job), strict=True):
            made = not path.exists()
            path.mkdir(mode=0o755, exist_ok=True)
            if made:
                self._limit(hierarchy, path)

    def _limit(self, hierarchy: Hierarchy, path: Path) -> None:
        files = {"pids": ("pids.max",), "memory": ("memory.max", "memory.limit_in_bytes")}
        for controller, value in self._limits.items():
            if value is None or hierarchy.controller not in (None, controller):
                continue
            for name in files[controller]:
                if (path / name).exists():
                    (path / name).write_text(str(value))

    def add(self, job: str, pid: int) -> None:
        """Move `pid` (with its threads) into the job's cgroup in every hierarchy. Only for a process
        that has not forked yet: its children stay where they are."""
        for path in self._dirs(job):
            (path / "cgroup.procs").write_text(str(pid))

    def holds(self, job: str, pid: int) -> bool:
        """Whether `pid` (alive, or a zombie not yet reaped) is in the job's v2 cgroup."""
        return _v2_path(pid) == self._relative(f"job-{job}")

    def within(self, pid: int) -> bool:
        """Whether `pid` (a zombie included) is in this executor's tree, that is of some job's."""
        path = _v2_path(pid)
        return path is not None and path.startswith(self._relative(""))

    def _relative(self, job_dir: str) -> str:
        own = self.v2.own.rstrip("/")
        return f"{own}/{self.name}/{job_dir}"

    def kill(self, job: str) -> None:
        """SIGKILL every process in the job's cgroup, wait (EMPTY_WAIT_S at most) until it is empty and
        remove it. One that will not empty is left (logged), and killed again with the job's next end."""
        dirs = [path for path in self._dirs(job) if path.exists()]
        if not dirs:
            return
        v2 = self.v2.base(self.name) / f"job-{job}"
        deadline = time.monotonic() + EMPTY_WAIT_S
        for _ in range(KILL_ROUNDS):
            with contextlib.suppress(FileNotFoundError):
                (v2 / "cgroup.kill").write_text("1")
            left = [pid for path in dirs for pid in _procs(path)]
            for pid in left:  # v1's leftovers (and a v2 kernel without cgroup.kill)
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            if not left or time.monotonic() >= deadline:
                break
            time.sleep(0.02)
        for path in dirs:
            try:
                path.rmdir()
            except OSError as err:
                if err.errno != errno.ENOENT:
                    log.warning("job %s: its cgroup %s cannot be removed yet: %s", job, path, err)


    def close(self) -> None:
        """Remove the executor's tree where no job's cgroup is left in it (at its stop: one that
        stops with ranks still running, or dies, leaves them for the next executor to adopt)."""
        for hierarchy in self._found:
            with contextlib.suppress(OSError):
                hierarchy.base(self.name).rmdir()


def _procs(path: Path) -> list[int]:
    try:
        return [int(pid) for pid in (path / "cgroup.procs").read_text().split()]
    except FileNotFoundError:
        return []


def _v2_path(pid: int) -> str | None:
    """`pid`'s cgroup v2 path (its `0::` line of /proc/PID/cgroup, which a zombie keeps), or None."""
    try:
        text = Path(f"/proc/{pid}/cgroup").read_text()
    except OSError:
        return None
    for line in text.splitlines():
        if line.startswith("0::"):
            return line[3:].removesuffix(" (deleted)")
    return None
