"""The executor's handles on the zygote and each job's launcher (forkserver.py): which commands are
forked warm, the requests sent, and the answers believed, only for a process the executor can prove
is the launcher or rank it asked for (docs/executor.md, "Job launchers: warm start and containment").
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import json
import logging
import os
import select
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from trainmedic.recovery.executor.forkserver import MAX_REQUEST
from trainmedic.recovery.executor.job_dirs import RankUser

log = logging.getLogger(__name__)

PR_SET_CHILD_SUBREAPER = 36
ANSWER_TIMEOUT_S = 120.0  # the zygote's first answer waits for its `import torch`, which load may slow


class LauncherFailed(OSError):
    """The launcher itself failed (exited, hung, answered what it cannot prove): it is not used again."""


def become_subreaper() -> bool:
    """Make orphaned descendants of this process its children (Linux). False where unsupported."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


class _Channel:
    """A request-and-answer socket (SOCK_SEQPACKET: a packet each), one descriptor sent with each
    request; one exchange at a time, an answer waited for ANSWER_TIMEOUT_S at most."""

    def __init__(self, sock: socket.socket, who: str) -> None:
        sock.settimeout(ANSWER_TIMEOUT_S)
        self._sock, self._who, self._lock = sock, who, threading.Lock()

    def ask(self, request: dict, fd: int) -> dict:
        data = json.dumps(request).encode()
        if len(data) > MAX_REQUEST:
            raise OSError(errno.E2BIG, f"a request of {len(data)} bytes (a rank's environment) is over "
                          f"{MAX_REQUEST}")
        with self._lock:
            try:
                socket.send_fds(self._sock, [data], [fd])
                reply = self._sock.recv(MAX_REQUEST)
            except OSError as err:  # a timeout included
                raise LauncherFailed(f"{self._who} did not answer: {err}") from None
        if not reply:
            raise LauncherFailed(f"{self._who} closed its channel")
        return json.loads(reply)

    def close(self) -> None:
        self._sock.close()


class Zygote:
    """The process every job's launcher is forked from (forkserver.py), run as the executor's user
    (each launcher becomes its job's), without the user site directory (`-s`), as the ranks are,
    nor the directory it starts in on its path (`-P`: it imports as root);
    `warm`: with torch imported. Started at once, so that it warms up early."""

    def __init__(self, *, warm: bool, env: Mapping[str, str] | None = None) -> None:
        # SPT_NOENV: a rank's title stays within the server's command line, so that /proc/PID/environ
        # still reads as the server's environment (setproctitle writes over it otherwise)
        server_env = {**(env or os.environ), "OMP_NUM_THREADS": "1", "PYTHONNOUSERSITE": "1",
                      "SPT_NOENV": "1"}
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            self._proc = subprocess.Popen(
                [sys.executable, "-s", "-P", "-m", "trainmedic.recovery.executor.forkserver",
                 str(theirs.fileno()), *(["--warm"] if warm else [])],
                stdin=subprocess.DEVNULL, env=server_env, pass_fds=(theirs.fileno(),),
            )
        finally:
            theirs.close()
        self._channel = _Channel(ours, "the launchers' zygote")

    @property
    def pid(self) -> int:
        return self._proc.pid

    def alive(self) -> bool:
        return self._proc.poll() is None

    def spawn(self, user: RankUser | None = None) -> JobLauncher:
        """A new job launcher, forked as `user` (else the executor's user; proven: the zygote's child,
        of that user, started after the request); LauncherFailed when the zygote fails."""
        if not self.alive():
            raise LauncherFailed(f"the launchers' zygote exited with code {self._proc.returncode}")
        uid = os.getuid() if user is None else user.uid
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        asked = boot_ticks()
        try:
            answer = self._channel.ask({} if user is None else {"uid": user.uid, "gid": user.gid},
                                       theirs.fileno())
        except LauncherFailed:
            ours.close()
            self.close()
            raise
        finally:
            theirs.close()
        if "error" in answer:  # the zygote is well: this launcher could not be made
            ours.close()
            raise LauncherFailed(f"the launchers' zygote could not fork a launcher: {answer['error']}")
        pid = answer.get("pid")
        stat = proc_stat(int(pid)) if pid is not None else None
        wrong = ("is not there" if stat is None else "is not the zygote's child" if int(stat[1]) != self.pid
                 else "started before it was asked for" if int(stat[19]) < asked
                 else "runs as another user" if proc_uid(int(pid)) != uid else None)
        if wrong is not None:
            ours.close()
            self.close()
            raise LauncherFailed(f"the launchers' zygote answered {answer}, which {wrong}: it is replaced")
        return JobLauncher(int(pid), ours, uid)

    def close(self) -> None:
        """Close the channel and kill the zygote (it holds nothing to save; the launchers are
        killed with their jobs), then reap it."""
        self._channel.close()
        if self._proc.poll() is None:
            self._proc.kill()
        self._proc.wait()


class JobLauncher:
    """One job's launcher (forked by the zygote, of `uid`), on `sock`; `in_job` is what proves a pid
    is in the job's cgroup (None where there are no cgroups). Signalled through a pidfd, so never
    another process that got its pid."""

    def __init__(self, pid: int, sock: socket.socket, uid: int) -> None:
        self.pid = pid
        self._pidfd = os.pidfd_open(pid)
        self._channel = _Channel(sock, "the job's launcher")
        self._uid = uid
        self.in_job: Callable[[int], bool] | None = None

    def alive(self) -> bool:
        """False once the launcher has exited (its pidfd reads as ready)."""
        return self._pidfd >= 0 and not select.select([self._pidfd], [], [], 0)[0]

    def launch(self, argv: Sequence[str], env: Mapping[str, str], log_fd: int, cwd: str | None = None,
               title: str | None = None, *, warm: bool = False) -> int:
        """Start a rank with `log_fd` as its output, in `cwd` (else the launcher's directory): `argv`
        run in the fork as python would when `warm` and it is a form python_main.py runs (named
        `TITLE: python ...` in ps), else exec'd; returns its pid, proven. Raises OSError when the command
        cannot be exec'd (its errno), LauncherFailed when the launcher fails."""
        request = {"argv": list(argv), "warm": warm, "env": dict(env), "cwd": cwd, "title": title}
        if not self.alive():
            raise LauncherFailed("the job's launcher exited")
        asked = boot_ticks()
        try:
            answer = self._channel.ask(request, log_fd)
        except LauncherFailed:
            self.close()
            raise
        pid = answer.get("pid")
        if pid is not None:
            wrong = self.disproof(int(pid), asked)
            if wrong is not None:
                self.close()
                raise LauncherFailed(f"the job's launcher answered pid {pid}, which {wrong}: neither "
                                     "signalled nor waited for; the launcher is replaced")
        if "errno" in answer:  # the rank could not exec and exits 127: our child (proven), reaped here,
            with contextlib.suppress(ProcessLookupError):  # killed first should anything else have said so
                os.kill(int(pid), signal.SIGKILL)
            os.waitpid(int(pid), 0)
            raise OSError(int(answer["errno"]), answer["error"])
        if "error" in answer:
            raise LauncherFailed(f"the job's launcher could not start the rank: {answer['error']}")
        return int(pid)

    def disproof(self, pid: int, asked: int) -> str | None:
        """Why `pid` is not a rank this launcher started after `asked` (boot_ticks), or None when it is:
        a child of this executor (its subreaper), leading its own session, of the launcher's user,
        started after the request, and in the job's cgroup where there is one."""
        stat = proc_stat(pid)
        if stat is None:
            return "does not exist"
        ppid, session, started = int(stat[1]), int(stat[3]), int(stat[19])
        if ppid != os.getpid():
            return "is not a child of this executor"
        if session != pid:
            return "does not lead a session of its own"
        if started < asked:
            return "started before it was asked for"
        if proc_uid(pid) != self._uid:
            return "runs as another user"
        if self.in_job is not None and not self.in_job(pid):
            return "is not in the job's cgroup"
        return None

    def close(self) -> None:
        """Close the channel and kill the launcher (its zygote reaps it)."""
        self._channel.close()
        if self._pidfd >= 0:
            with contextlib.suppress(ProcessLookupError):
                signal.pidfd_send_signal(self._pidfd, signal.SIGKILL)
            os.close(self._pidfd)
            self._pidfd = -1


def boot_ticks() -> int:
    """Now, in the clock ticks since boot that /proc/PID/stat's start time counts."""
    return int(time.clock_gettime(time.CLOCK_BOOTTIME) * os.sysconf("SC_CLK_TCK"))


def proc_stat(pid: int) -> list[str] | None:
    """/proc/PID/stat's fields after the command name (state first), or None when it is gone."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None


def proc_uid(pid: int) -> int | None:
    """The process's real uid (a zombie's too), or None when it is gone."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("Uid:"):
                return int(line.split()[1])
    except OSError:
        return None
    return None
