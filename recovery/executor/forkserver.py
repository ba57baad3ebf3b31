"""A warm launcher for rank processes: one interpreter that has already imported torch forks each
`PYTHON -m MODULE` rank, so a (re)start costs a fork instead of an interpreter start plus
`import torch` (docs/executor.md, "Warm rank start (the fork server)").
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import importlib
import json
import logging
import os
import runpy
import shutil
import signal
import subprocess
import sys
import threading
import traceback
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import setproctitle

from trainmedic.recovery.executor.core.admission import NICENESS
from trainmedic.recovery.executor.job_dirs import RankUser

log = logging.getLogger(__name__)

PR_SET_CHILD_SUBREAPER = 36
PRELOAD = ("torch", "torch.distributed")
PRELOAD_ENV = "TRAINMEDIC_WARM_PRELOAD"


@dataclass(frozen=True)
class WarmTarget:
    """A rank command the fork server can run: a module of this interpreter, at a niceness."""

    module: str
    args: tuple[str, ...]
    nice: int = 0


def warm_target(argv: Sequence[str], python: str = sys.executable) -> WarmTarget | None:
    """The warm form of `argv`, or None when it must start cold. Only an ASCII niceness in nice's
    form is read here (`str.isdigit` also takes `²`, which `int` refuses); any other is `nice`'s to judge."""
    rest, nice = list(argv), 0
    if rest[:2] == ["nice", "-n"] and len(rest) > 2:
        if not NICENESS.fullmatch(rest[2]):
            return None
        nice, rest = int(rest[2]), rest[3:]
    if len(rest) < 3 or rest[1] != "-m":
        return None
    exe = rest[0] if os.sep in rest[0] else shutil.which(rest[0])
    if exe is None or os.path.abspath(exe) != os.path.abspath(python):
        return None
    return WarmTarget(rest[2], tuple(rest[3:]), nice)


def become_subreaper() -> bool:
    """Make orphaned descendants of this process its children (Linux). False where unsupported."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


class WarmLauncher:
    """The executor's handle on its fork server (started at once, so it warms up early), run as
    `user` when given (its forks are ranks) and without the user site directory (`-s`), as the
    ranks are."""

    def __init__(self, env: Mapping[str, str] | None = None, user: RankUser | None = None) -> None:
        # SPT_NOENV: a rank's title stays within the server's command line, so that /proc/PID/environ
        # still reads as the server's environment (setproctitle writes over it otherwise)
        server_env = {**(env or os.environ), "OMP_NUM_THREADS": "1", "PYTHONNOUSERSITE": "1",
                      "SPT_NOENV": "1"}
        self._proc = subprocess.Popen(
            [sys.executable, "-s", "-m", "trainmedic.recovery.executor.forkserver"], stdin=subprocess.PIPE,
            stdout=subprocess.PIPE, env=server_env, text=True, bufsize=1,
            **({} if user is None else {"user": user.uid, "group": user.gid, "extra_groups": []}),
        )
        self._lock = threading.Lock()

    def launch(
        self, target: WarmTarget, env: Mapping[str, str], log_path: Path, cwd: str | None = None,
        title: str | None = None,
    ) -> int:
        """Fork a rank (in `cwd`, else the server's directory, named `title` in ps); returns its pid.
        Raises OSError when the server cannot."""
        request = {"module": target.module, "args": list(target.args), "env": dict(env),
                   "log": str(log_path), "nice": target.nice, "cwd": cwd, "title": title}
        with self._lock:
            if self._proc.poll() is not None:
                raise OSError(f"the fork server exited with code {self._proc.returncode}")
            self._proc.stdin.write(json.dumps(request) + "\n")
            self._proc.stdin.flush()
            line = self._proc.stdout.readline()
        if not line:
            raise OSError("the fork server closed its output")
        answer = json.loads(line)
        if "error" in answer:
            raise OSError(f"the fork server could not start {target.module}: {answer['error']}")
        return int(answer["pid"])

    def close(self) -> None:
        if self._proc.poll() is None:
            self._proc.stdin.close()
            try:
                self._proc.wait(5)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()


def serve() -> None:
    """The server's loop: preload, then one fork per request line, until stdin closes.

    JSON lines on stdin/stdout: {"module", "args", "env", "log", "nice", "cwd", "title"} in, {"pid"} or
    {"error"} out."""
    answers = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)  # whatever a preloaded module prints must not corrupt the answers
    extra = [name.strip() for name in os.environ.get(PRELOAD_ENV, "").split(",") if name.strip()]
    for name in (*PRELOAD, *extra):
        with contextlib.suppress(ImportError):  # a job without torch is still served
            importlib.import_module(name)
    for line in sys.stdin:
        try:
            answer = {"pid": _fork_rank(json.loads(line))}
        except Exception as err:  # the answer says what failed; the server stays up
            answer = {"error": f"{type(err).__name__}: {err}"}
        answers.write(json.dumps(answer) + "\n")
        answers.flush()


def _fork_rank(request: dict) -> int:
    """Fork twice; the grandchild runs the module and its pid comes back through a pipe."""
    read_end, write_end = os.pipe()
    middle = os.fork()
    if middle == 0:  # the middle process: fork the rank, tell its pid, exit at once
        os.close(read_end)
        try:
            rank = os.fork()
            if rank == 0:
                os.close(write_end)
                _become_rank(request)  # never returns
            os.write(write_end, str(rank).encode())
        finally:
            os._exit(0)
    os.close(write_end)
    with os.fdopen(read_end) as pipe:
        text = pipe.read()
    os.waitpid(middle, 0)
    if not text:
        raise OSError("the rank could not be forked")
    return int(text)


def _become_rank(request: dict) -> None:
    """In the forked rank: own session, output to its log, its title (else ps shows every rank as the
    fork server), its environment, then run the module."""
    code = 1
    try:
        os.setsid()
        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGUSR1):
            signal.signal(sig, signal.SIG_DFL)
        if request.get("nice"):
            os.nice(int(request["nice"]))
        out = os.open(request["log"], os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.dup2(out, 1)
        os.dup2(out, 2)
        if request.get("title"):
            setproctitle.setproctitle(request["title"])
        os.environ.clear()
        os.environ.update(request["env"])
        if request.get("cwd"):
            os.chdir(request["cwd"])
            if not sys.flags.safe_path:  # what `python -m` puts first when started there
                sys.path[0] = os.getcwd()
        sys.argv = [request["module"], *request["args"]]
        try:
            runpy.run_module(request["module"], run_name="__main__", alter_sys=True)
            code = 0
        except SystemExit as stop:
            code = _exit_code(stop)
    except BaseException:
        traceback.print_exc()
    finally:
        try:
            _finish_like_an_interpreter()
        finally:
            os._exit(code)


def _exit_code(stop: SystemExit) -> int:
    """The status a cold interpreter exits with for `stop`; a message is printed, as it would be."""
    if stop.code is None or isinstance(stop.code, int):
        return stop.code or 0
    print(stop.code, file=sys.stderr)
    return 1


def _finish_like_an_interpreter() -> None:
    """What interpreter exit does and `os._exit` skips: the atexit handlers (the in-band hook's flush,
    which publishes the rank's last steps and its worker_error, and logging's), then stdout and
    stderr. Without them a warm rank's error never reached Kafka and its fault was blamed on the node."""
    try:
        atexit._run_exitfuncs()  # reports, never raises, a failing handler, as interpreter exit does
    finally:
        sys.stdout.flush()
        sys.stderr.flush()


if __name__ == "__main__":
    serve()
