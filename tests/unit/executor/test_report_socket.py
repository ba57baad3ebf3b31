"""What a rank may report through its executor's socket, with real processes.

The socket (`ReportServer` and the hook's `ReportChannel`): the kernel's word on who connects is
what counts. The checks themselves, with plain values: test_rank_reports.py.
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.unit.executor.report_lines import RANK, line
from trainmedic.recovery.executor.core.reports import LaunchedRank
from trainmedic.recovery.executor.report_server import (
    MAX_PER_RANK,
    MAX_UNKNOWN,
    MAX_UNKNOWN_PER_USER,
    ReportServer,
)
from trainmedic.recovery.executor.report_sockets import job_socket, socket_folder
from trainmedic.runtime.hook import Hook, WorkerIdentity
from trainmedic.runtime.report_channel import ReportChannel
from trainmedic.schemas import WorkerFailed, WorkerStarted, WorkerStepped


@pytest.fixture
def server(tmp_path: Path) -> Iterator[tuple[ReportServer, dict[int, LaunchedRank], list]]:
    launched: dict[int, LaunchedRank] = {}
    published: list = []
    server = ReportServer(socket_folder(tmp_path), node="n1", resolve=launched.get,
                          publish=published.append)
    server.start()
    yield server, launched, published
    server.close()


def wait_for(condition, timeout_s: float = 20.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)


RANK_SCRIPT = """
import sys
from trainmedic.runtime.hook import Hook
hook = Hook.from_env()
hook.started()
for step in range(3):
    hook.step(step, 0.01)
with hook.capture():
    raise RuntimeError(sys.argv[1])
"""


def launch(server: ReportServer, job: str = "llm", generation: int = 3, rank: int = 1) -> subprocess.Popen:
    env = {"PATH": "/usr/bin:/bin", "TRAINMEDIC_JOB": job, "TRAINMEDIC_NODE": "n1", "RANK": str(rank),
           "WORLD_SIZE": "4", "TRAINMEDIC_GENERATION": str(generation), "LOCAL_RANK": "1",
           "TRAINMEDIC_REPORT_SOCKET": str(server.listen(job)), "PYTHONPATH": str(Path(__file__).parents[3])}
    return subprocess.Popen([sys.executable, "-c", RANK_SCRIPT, "boom"], env=env, stderr=subprocess.PIPE)


def test_a_launched_rank_reports_through_the_socket_as_itself(server) -> None:
    srv, launched, published = server
    process = launch(srv)
    launched[process.pid] = RANK  # registered after the start, as the executor does: its lines wait
    process.wait(timeout=60)
    wait_for(lambda: len(published) == 5)
    assert [type(e) for e in published] == [WorkerStarted] + [WorkerStepped] * 3 + [WorkerFailed]
    assert {(e.job, e.rank, e.generation, e.pid) for e in published} == {("llm", 1, 3, process.pid)}
    assert published[-1].error == "RuntimeError: boom"
    assert oct(srv.folder.parent.stat().st_mode & 0o777) == "0o711"
    assert oct(srv.folder.stat().st_mode & 0o777) == "0o711"
    assert oct(srv.listen("llm").parent.stat().st_mode & 0o777) == "0o700"  # ranks of the executor's user


def test_a_process_the_executor_did_not_launch_is_heard_but_never_published(server) -> None:
    srv, launched, published = server
    stranger = launch(srv)  # a neighbour who found the socket: nobody registered it
    stranger.wait(timeout=60)
    impostor = launch(srv, job="other-job", generation=10**15)  # a real rank naming another job
    launched[impostor.pid] = RANK
    impostor.wait(timeout=60)
    time.sleep(1.0)
    assert published == []


def test_the_hook_drops_and_counts_while_no_executor_listens_and_reconnects(tmp_path: Path) -> None:
    folder = tmp_path / "sockets"
    path = job_socket(folder, "llm")
    now = [0.0]
    channel = ReportChannel(str(path), retry_s=1.0, clock=lambda: now[0])
    hook = Hook(WorkerIdentity("llm", 1, 4, "n1", 3), channel)
    event = WorkerStarted(ts=1.0, node="n1", job="llm", rank=1, world_size=4, generation=3)
    assert channel.send(event) is False and channel.dropped == 1
    launched = {os.getpid(): RANK}
    published: list = []
    srv = ReportServer(folder, node="n1", resolve=launched.get, publish=published.append)
    srv.start()
    srv.listen("llm")
    try:
        assert channel.send(event) is False  # still inside retry_s: no reconnect storm
        now[0] = 1.5
        assert channel.send(event) is True
        wait_for(lambda: len(published) == 1)
    finally:
        srv.close()
        hook.close(0.1)
    assert channel.dropped == 2


def test_a_rank_cannot_hold_more_than_a_few_connections(server) -> None:
    srv, launched, _ = server
    launched[os.getpid()] = RANK
    socks = []
    for _ in range(MAX_PER_RANK + 4):
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.connect(str(srv.listen("llm")))
        sock.settimeout(0.3)
        socks.append(sock)
    closed = 0
    for sock in socks:
        with contextlib.suppress(TimeoutError):
            closed += sock.recv(1) == b""  # the server closed it
        sock.close()
    assert closed == 4



def test_a_ranks_last_lines_are_read_after_it_ended_then_its_connections_close(server) -> None:
    srv, launched, published = server
    launched[os.getpid()] = RANK
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.connect(str(srv.listen("llm")))
    wait_for(lambda: srv._reports)  # identified
    srv.forget(os.getpid(), RANK)  # the executor reaped it before the relay read its last words
    sock.sendall(line(type="worker_error", error="last words") + b"\n")
    wait_for(lambda: published)
    assert published[0].error == "last words"
    sock.settimeout(10.0)
    assert sock.recv(1) == b""  # closed once the grace is over
    sock.close()


def test_strangers_cannot_fill_the_connection_table(server) -> None:
    srv, _, _ = server
    socks = []
    for _ in range(MAX_UNKNOWN_PER_USER + 5):
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.connect(str(srv.listen("llm")))
        socks.append(sock)
    wait_for(lambda: len(srv._connections) == MAX_UNKNOWN_PER_USER, 3.0)  # past one user's budget: closed
    assert MAX_UNKNOWN_PER_USER < MAX_UNKNOWN  # and every user's together at most MAX_UNKNOWN
    wait_for(lambda: not srv._connections, 15.0)  # and the others once known as no rank's
    for sock in socks:
        sock.close()


def test_a_stranger_that_holds_every_slot_and_reconnects_at_once_never_keeps_a_rank_out(server) -> None:
    """Issue 42, B2: another local user held the unknown-peer slots and reconnected at once; a new
    job's reports: none published for 75 s. A process known as a rank goes before any other."""
    srv, launched, published = server
    srv._cap = MAX_UNKNOWN_PER_USER  # the table as full as a stranger can make it
    stop = threading.Event()

    def squat() -> None:
        held: list[socket.socket] = []
        while not stop.is_set():
            held = [s for s in held if s.fileno() >= 0 and not _closed(s)]
            while len(held) < MAX_UNKNOWN_PER_USER + 2:
                sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                sock.connect(str(srv.listen("llm")))
                held.append(sock)
            time.sleep(0.01)
        for sock in held:
            sock.close()

    squatter = threading.Thread(target=squat, daemon=True)
    squatter.start()
    try:
        wait_for(lambda: len(srv._connections) == MAX_UNKNOWN_PER_USER, 5.0)
        process = launch(srv)
        launched[process.pid] = RANK
        process.wait(timeout=60)
        wait_for(lambda: len(published) == 5, 15.0)
    finally:
        stop.set()
        squatter.join(10)


def _closed(sock: socket.socket) -> bool:
    """Whether the server closed `sock` (a read of 0 bytes), without blocking."""
    try:
        return sock.recv(1, socket.MSG_DONTWAIT) == b""
    except BlockingIOError:
        return False
    except OSError:
        return True


def test_a_socket_folder_another_user_made_first_is_not_used_and_the_executor_still_listens(
        tmp_path: Path) -> None:
    folder = socket_folder(tmp_path, tmp=str(tmp_path))
    folder.parent.mkdir(mode=0o777)
    os.chown(folder.parent, 65534, 65534)  # nobody's: it could put a socket of its own there
    srv = ReportServer(folder, node="n1", resolve={}.get, publish=lambda report: None)
    srv.start()
    try:
        assert srv.folder.parent != folder.parent and srv.folder.parent.stat().st_uid == os.getuid()
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            sock.connect(str(srv.listen("llm")))
    finally:
        srv.close()



KEPT_SCRIPT = """
import sys, time
from pathlib import Path
from trainmedic.runtime.hook import Hook
hook = Hook.from_env()
hook.step(7, 0.01)
hook.waiting()  # a peer failed: it waits, alive, for the next generation
while not Path(sys.argv[1]).exists():
    time.sleep(0.02)
hook.regenerate(4)
hook.started()
hook.step(7, 0.01)
hook.close()
"""


def test_a_rank_kept_into_a_new_generation_is_heard_about_it_on_the_same_connection(
        server, tmp_path: Path) -> None:
    """The executor keeps a waiting rank (`Runtime.run`): from then on its reports are checked
    against the generation it was kept into, on the connection it already holds."""
    srv, launched, published = server
    go = tmp_path / "kept"
    env = {"PATH": "/usr/bin:/bin", "TRAINMEDIC_JOB": "llm", "TRAINMEDIC_NODE": "n1", "RANK": "1",
           "WORLD_SIZE": "4", "TRAINMEDIC_GENERATION": "3", "LOCAL_RANK": "1",
           "TRAINMEDIC_REPORT_SOCKET": str(srv.listen("llm")), "PYTHONPATH": str(Path(__file__).parents[3])}
    process = subprocess.Popen([sys.executable, "-c", KEPT_SCRIPT, str(go)], env=env)
    launched[process.pid] = RANK
    wait_for(lambda: [e.type for e in published] == ["worker_step", "worker_waiting"])
    launched[process.pid] = LaunchedRank("llm", 4, 1, 4, local_rank=1, hang_floor_s=120.0)  # kept
    go.touch()
    process.wait(timeout=60)
    wait_for(lambda: len(published) == 4)
    assert [(e.type, e.generation) for e in published] == [
        ("worker_step", 3), ("worker_waiting", 3), ("worker_start", 4), ("worker_step", 4)]


def test_a_rank_that_ended_before_it_was_registered_is_still_heard(server) -> None:
    """A warm rank can fork, report and end before its executor has recorded its pid: what it
    sent waits, its connection closed, until it is known (or UNKNOWN_GRACE_S passes)."""
    srv, launched, published = server
    process = launch(srv)
    process.wait(timeout=60)
    time.sleep(0.5)  # the server has read the end of its connection by now
    assert published == []
    launched[process.pid] = RANK
    wait_for(lambda: len(published) == 5)
    assert [type(e) for e in published] == [WorkerStarted] + [WorkerStepped] * 3 + [WorkerFailed]


def test_a_rank_registered_and_reaped_between_two_ticks_is_still_heard(server) -> None:
    """The same rank, its pid recorded and its end reaped before the server's next tick identified its
    connection: what it sent is still its own, not a stranger's."""
    srv, _, published = server
    process = launch(srv)
    process.wait(timeout=60)
    time.sleep(0.5)  # the server has read the end of its connection by now
    assert published == []
    srv.forget(process.pid, RANK)  # `launched` held it for a moment between two ticks, then let it go
    wait_for(lambda: len(published) == 5)
    assert [type(e) for e in published] == [WorkerStarted] + [WorkerStepped] * 3 + [WorkerFailed]


def connect_as(uid: int, gid: int, path: Path) -> int:
    """0 when a process of `uid` and only group `gid` can connect to `path`, else its errno."""
    pid = os.fork()
    if pid == 0:
        code = 0
        try:
            os.setgroups([])
            os.setgid(gid)
            os.setuid(uid)
            socket.socket(socket.AF_UNIX, socket.SOCK_STREAM).connect(str(path))
        except OSError as err:
            code = err.errno or 1
        finally:
            os._exit(code)
    return os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])


def test_only_the_jobs_group_may_reach_its_socket_and_it_goes_with_the_job(server) -> None:
    """Issue 42, item 3: a socket per job, in a folder of the executor's that only the job's group
    may enter (0710), so that another user cannot even connect."""
    assert os.geteuid() == 0, "a folder of another group is root's to make"
    srv, _, _ = server
    job_gid = 2147400000
    path = srv.listen("llm", gid=job_gid)
    assert srv.listen("llm", gid=job_gid) == path  # one per job
    folder = path.parent.stat()
    assert (folder.st_uid, folder.st_gid, oct(folder.st_mode & 0o777)) == (0, job_gid, "0o710")
    assert connect_as(job_gid, job_gid, path) == 0
    assert connect_as(65534, 65534, path) == errno.EACCES  # another user: not even a connection
    assert job_socket(srv.folder, "other") != path
    srv.unlisten("llm")
    assert not path.parent.exists()


def test_a_socket_folder_removed_under_the_executor_is_made_again_for_the_next_job(server) -> None:
    """A tmp cleaner (or another test session's clean-up) removed the folder: every later start
    failed with ENOENT until the executor restarted."""
    srv, launched, published = server
    shutil.rmtree(srv.folder.parent)
    process = launch(srv)
    launched[process.pid] = RANK
    process.wait(timeout=60)
    wait_for(lambda: len(published) == 5)
    assert oct(srv.folder.stat().st_mode & 0o777) == "0o711"
