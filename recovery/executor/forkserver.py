"""The processes every rank is forked from (docs/executor.md, "Job launchers: warm start and
containment"); the executor's side is `launcher.py`.

The executor starts one zygote, as its own user: warm, it imports torch first (PRELOAD). For each
job on the node the zygote forks a launcher (a fork: nothing is imported again), which becomes the
job's user at once and which the executor moves into the job's cgroup before it forks anything;
every rank of the job is forked by that launcher. A rank started as `PYTHON -m MODULE`, `PYTHON
SCRIPT` or a console script of this interpreter runs in the fork as python would run it
(python_main.py), so a (re)start costs a fork instead of an interpreter start plus `import torch`;
any other command is forked and exec'd. What this module imports is the standard library,
setproctitle and python_main (the standard library too) only: its memory is every warm rank's.

Neither is dumpable, so that no rank (of their user) can ptrace them or take their descriptors
(`pidfd_getfd`), and a rank keeps none of their channels: an answer can only come from them.
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import importlib
import json
import os
import signal
import socket
import sys
import traceback
from collections.abc import Callable

import setproctitle

from trainmedic.recovery.executor import python_main

# What a warm zygote imports, and so every warm rank has: torch, the worker runtime a rank imports
# (pydantic and the schemas with it, which each rank imported at start otherwise), and what a
# torch.optim optimizer's constructor imports (torch._dynamo: without it, bench/user_train.py's
# in-process restore phase was 1.13-1.21 s, with it 0.03-0.05 s; docs/recovery-benchmark.md).
PRELOAD = ("torch", "torch.distributed", "torch.optim", "torch._dynamo", "trainmedic.runtime",
           "trainmedic.runtime.rank")
PRELOAD_ENV = "TRAINMEDIC_WARM_PRELOAD"
MAX_REQUEST = 4 << 20  # a request's bytes (a rank's whole environment is in it)
PR_SET_DUMPABLE = 4
_ZYGOTE_CHANNEL = -1  # the zygote's end of its channel, which no launcher keeps
_CHANNEL = -1  # a launcher's end of its channel, which no rank keeps


def serve(channel_fd: int, warm: bool) -> None:
    """The zygote: not dumpable, preloaded when `warm`, then one launcher forked per request on
    `channel_fd` (its end of the executor's SOCK_SEQPACKET pair) until the executor closes its end.

    A request is a JSON packet, `{}` or the job's user `{"uid", "gid"}`, with the launcher's end of a
    new socket pair attached (SCM_RIGHTS); the answer is {"pid"} of the launcher, or {"error"}.
    Launchers that end are reaped."""
    set_dumpable(False)
    os.dup2(2, 1)  # whatever a preloaded module prints goes to the executor's log
    global _ZYGOTE_CHANNEL
    _ZYGOTE_CHANNEL = channel_fd
    channel = socket.socket(fileno=channel_fd)
    if warm:
        extra = [name.strip() for name in os.environ.get(PRELOAD_ENV, "").split(",") if name.strip()]
        for name in (*PRELOAD, *extra):
            with contextlib.suppress(ImportError):  # a job without torch is still served
                importlib.import_module(name)
    sys.stdout.flush()  # what the imports printed is the zygote's, never a rank's
    signal.signal(signal.SIGCHLD, _reap_launchers)
    _answer_requests(channel, _fork_launcher)


def _answer_requests(channel: socket.socket, fork: Callable[[dict, int], dict]) -> None:
    """One answer per request, each with one descriptor attached, until the channel closes."""
    while True:
        data, fds, _, _ = socket.recv_fds(channel, MAX_REQUEST, 1)
        if not data:
            return
        try:
            if len(fds) != 1:
                raise OSError("a request without its descriptor")
            answer = fork(json.loads(data), fds[0])
        except Exception as err:  # the answer says what failed; the server stays up
            answer = {"error": f"{type(err).__name__}: {err}"}
        finally:
            for fd in fds:
                os.close(fd)
        channel.sendall(json.dumps(answer).encode())


def _fork_launcher(request: dict, channel_fd: int) -> dict:
    """Fork a job's launcher, serving ranks on `channel_fd`, as the job's user when the request names
    one (its uid and gid, no other group); answered once it is that user."""
    global _CHANNEL
    ready_read, ready_write = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            os.close(ready_read)
            signal.signal(signal.SIGCHLD, signal.SIG_DFL)  # it waits for its own forks
            if "uid" in request:
                try:
                    os.setgroups([])
                    os.setgid(int(request["gid"]))
                    os.setuid(int(request["uid"]))
                except OSError as err:
                    os.write(ready_write, str(err.errno).encode())
                    raise
                set_dumpable(False)  # as it was: no process of the job's user may ptrace it
            os.write(ready_write, b"ok")
            os.close(ready_write)
            os.close(_ZYGOTE_CHANNEL)  # the executor's channel to the zygote is not the job's
            _CHANNEL = channel_fd
            _answer_requests(socket.socket(fileno=channel_fd), _fork_rank)
        finally:
            os._exit(0)
    os.close(ready_write)
    with os.fdopen(ready_read, "rb") as ready:
        said = ready.read(16)
    if said != b"ok":
        code = int(said) if said.isdigit() else 0
        raise OSError(code, f"the launcher could not become uid {request.get('uid')} "
                            f"({os.strerror(code) if code else 'it ended first'})")
    return {"pid": pid}


def _reap_launchers(_signum: int, _frame: object) -> None:
    """The zygote's SIGCHLD: launchers the executor killed (with their job) are reaped."""
    with contextlib.suppress(ChildProcessError):
        while os.waitpid(-1, os.WNOHANG)[0] > 0:
            pass


def _fork_rank(request: dict, log_fd: int) -> dict:
    """Fork twice (the rank becomes the executor's child, its subreaper's); its pid comes back through
    a pipe, and an exec's failure through another, closed on exec."""
    pid_read, pid_write = os.pipe()
    failed_read, failed_write = os.pipe()  # both close on exec
    middle = os.fork()
    if middle == 0:  # the middle process: fork the rank, tell its pid, exit at once
        try:
            rank = os.fork()
            if rank == 0:
                for fd in (pid_read, pid_write, failed_read):
                    os.close(fd)
                _become_rank(request, log_fd, failed_write)  # never returns
            os.write(pid_write, str(rank).encode())
        finally:
            os._exit(0)
    os.close(pid_write)
    os.close(failed_write)
    with os.fdopen(pid_read) as pipe:
        text = pipe.read()
    os.waitpid(middle, 0)
    with os.fdopen(failed_read, "rb") as pipe:
        failure = pipe.read()  # empty once the rank exec'd or runs its module
    if not text:
        raise OSError("the rank could not be forked")
    if failure:
        number, _, message = failure.decode(errors="replace").partition(":")
        return {"pid": int(text), "errno": int(number), "error": message}
    return {"pid": int(text)}


def _become_rank(request: dict, log_fd: int, failed: int) -> None:
    """In the forked rank: own session, neither the server's channel nor its pipes (no answer can come
    from a rank), output to its log; then exec the command (every other descriptor closed, as
    subprocess does) or, when the request allows it (`warm`) and python_main can, run it here as
    python would, at its niceness, titled (else ps shows every rank as the server)."""
    code, interrupted = 1, False
    try:
        os.setsid()
        os.dup2(log_fd, 1)
        os.dup2(log_fd, 2)
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        for fd in {_CHANNEL, log_fd, null} - {0, 1, 2}:
            os.close(fd)
        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGUSR1):
            signal.signal(sig, signal.SIG_DFL)
        if request.get("cwd"):
            os.chdir(request["cwd"])
        program = _warm_program(request)
        if program is None:
            _exec(request["argv"], request["env"], failed)  # exec makes it dumpable
        os.close(failed)
        # Dumpable (its user may ptrace it, as a rank exec'd by its user) only now, holding nothing of
        # the launcher's; Ctrl-C raises KeyboardInterrupt, as in any python.
        set_dumpable(True)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        if program.target.nice:
            os.nice(program.target.nice)
        if request.get("title"):
            setproctitle.setproctitle(f"{request['title']}: {program.target.command()}")
        python_main.run(program, request["env"])
        code = 0  # it ran to its end
    except SystemExit as stop:
        code = _exit_code(stop)
    except BaseException as err:
        interrupted = isinstance(err, KeyboardInterrupt)
        _report(err)
    finally:
        try:
            _finish_like_an_interpreter()
        finally:
            if interrupted:  # as python: an uncaught KeyboardInterrupt ends the process by SIGINT
                signal.signal(signal.SIGINT, signal.SIG_DFL)
                os.kill(os.getpid(), signal.SIGINT)
            os._exit(code)


def _report(err: BaseException) -> None:
    """An uncaught exception, as interpreter exit reports it: through sys.excepthook (the job's own, if
    it set one), its traceback starting at the job's code (this module's and python_main's frames
    left out)."""
    ours = {__file__, python_main.__file__}
    tb = err.__traceback__
    while tb is not None and tb.tb_next is not None and tb.tb_frame.f_code.co_filename in ours:
        tb = tb.tb_next
    try:
        sys.excepthook(type(err), err.with_traceback(tb), tb)  # python prints the exception's own
    except BaseException:
        traceback.print_exc()


def _exec(argv: list[str], env: dict[str, str], failed: int) -> None:
    """Exec `argv` (searched on the env's PATH, as subprocess does); a failure goes to the server as
    `errno:message` and the rank exits 127. The signals Python ignores are a new program's again."""
    for sig in (signal.SIGPIPE, signal.SIGXFSZ):
        signal.signal(sig, signal.SIG_DFL)
    os.closerange(3, failed)
    os.closerange(failed + 1, os.sysconf("SC_OPEN_MAX"))
    try:
        os.execvpe(argv[0], argv, env)
    except OSError as err:
        os.write(failed, f"{err.errno or 0}:{err.strerror or err}: {argv[0]!r}".encode())
        os._exit(127)


def _warm_program(request: dict) -> python_main.Program | None:
    """What the rank runs in this fork (read as the rank's user, in its directory), or None: exec'd."""
    if not request.get("warm"):
        return None
    argv, env = request["argv"], request["env"]
    path = env.get("PATH", os.defpath)
    try:
        target = python_main.warm_target(argv, path=path) or python_main.console_script(argv, path)
        return None if target is None else python_main.loaded(target, env)
    except Exception:  # whatever the checks could not read: python itself runs it, and says what fails
        return None


def set_dumpable(on: bool) -> None:
    """Linux's PR_SET_DUMPABLE: off, only root may ptrace the process or open its /proc files."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_DUMPABLE, int(on), 0, 0, 0)


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
    serve(int(sys.argv[1]), warm=sys.argv[2:] == ["--warm"])
