"""Where job cgroups go: the hierarchies read from /proc/self/mountinfo and /proc/self/cgroup."""

from __future__ import annotations

from pathlib import Path

from trainmedic.recovery.executor.job_cgroup import Hierarchy, hierarchies

# A host like the project's CI machine: cgroup v2 without controllers, v1's controllers beside it.
MOUNTINFO = """\
30 25 0:26 / /sys/fs/cgroup ro,nosuid - tmpfs tmpfs ro,mode=755
31 30 0:27 / /sys/fs/cgroup/unified rw,nosuid,relatime - cgroup2 cgroup2 rw
35 30 0:31 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory
40 30 0:36 / /sys/fs/cgroup/pids rw,relatime - cgroup cgroup rw,pids
41 30 0:37 / /sys/fs/cgroup/cpu,cpuacct rw,relatime - cgroup cgroup rw,cpu,cpuacct
"""
OWN = "8:pids:/\n4:memory:/svc/abc\n1:cpu,cpuacct:/\n0::/system.slice/trainmedic.service\n"


def test_v2_and_v1_pids_and_memory_each_at_the_executors_own_cgroup() -> None:
    assert hierarchies(MOUNTINFO, OWN) == [
        Hierarchy(Path("/sys/fs/cgroup/unified"), "/system.slice/trainmedic.service", None),
        Hierarchy(Path("/sys/fs/cgroup/memory"), "/svc/abc", "memory"),
        Hierarchy(Path("/sys/fs/cgroup/pids"), "/", "pids"),
    ]
    v2 = hierarchies(MOUNTINFO, OWN)[0]
    assert v2.base("trainmedic-n1-x") == Path(
        "/sys/fs/cgroup/unified/system.slice/trainmedic.service/trainmedic-n1-x")


def test_a_pure_v2_host_has_one_hierarchy_and_a_v1_only_host_no_v2() -> None:
    pure = "31 25 0:27 / /sys/fs/cgroup rw,nosuid - cgroup2 cgroup2 rw,nsdelegate\n"
    assert hierarchies(pure, "0::/user.slice\n") == [Hierarchy(Path("/sys/fs/cgroup"), "/user.slice", None)]
    v1_only = MOUNTINFO.replace("cgroup2 cgroup2", "tmpfs tmpfs")
    assert all(h.controller for h in hierarchies(v1_only, OWN))
