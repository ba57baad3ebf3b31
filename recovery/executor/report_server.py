"""The executor's end of its ranks' local channel: a Unix socket per job that takes their reports, from
ranks the kernel says it launched, bounded everywhere (docs/security.md, "The job cannot steer the
healer"). Each job's socket is in a folder only the job's group (and the executor) may enter.
"""

from __future__ import annotations

import contextlib
import logging
import os
import resource
import selectors
import socket
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from trainmedic.recovery.executor import metrics
from trainmedic.recovery.executor.core.reports import (
    MAX_LINE,
    LaunchedRank,
    RankReports,
    Refused,
    Report,
    ReportLimits,
    check,
)
from trainmedic.recovery.executor.report_peers import Resolve, peer_credentials, rank_of
from trainmedic.recovery.executor.report_sockets import job_socket, owned_folder, remove_sockets

log = logging.getLogger(__name__)

MAX_CONNECTIONS = 1_024  # in all, and at most a quarter of the process's file limit (`connection_cap`)
MAX_UNKNOWN = 64  # of processes not (yet) known as ranks: a stranger's sockets cannot fill the table
MAX_UNKNOWN_PER_USER = 16  # of those, of one Unix user: another user cannot hold them all
MAX_PER_RANK = 8  # one hook needs one; a data loader's workers may each hold one
UNKNOWN_GRACE_S = 5.0  # how long lines of a process not (yet) known as a rank are held
ENDED_GRACE_S = 5.0  # how long a rank that ended may still be read (its last lines in the socket)
MAX_HELD_LINES = 16
ACCEPT_PAUSE_S = 1.0  # out of file descriptors: stop accepting this long rather than spin

Publish = Callable[[Report], None]


def connection_cap() -> int:
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    return MAX_CONNECTIONS if soft == resource.RLIM_INFINITY else max(16, min(MAX_CONNECTIONS, soft // 4))


@dataclass
class _Connection:
    sock: socket.socket
    pid: int
    uid: int
    since: float
    rank_pid: int | None = None
    buffer: bytearray = field(default_factory=bytearray)
    held: list[bytes] = field(default_factory=list)
    held_bytes: int = 0
    closed: bool = False  # closed by its process before it was known: what it held waits for that


class ReportServer:
    """Serves a socket per job (`listen`) in `folder` until `close()`; `publish` gets each report let
    through."""

    def __init__(self, folder: Path, *, node: str, resolve: Resolve, publish: Publish,
                 limits: ReportLimits | None = None, clock: Callable[[], float] = time.time,
                 on_tick: Callable[[], None] = lambda: None) -> None:
        self.folder = folder
        self._node = node
        self._resolve = resolve
        self._publish = publish
        self._limits = limits or ReportLimits()
        self._clock = clock
        self._on_tick = on_tick
        self._selector = selectors.DefaultSelector()
        self._connections: dict[int, _Connection] = {}  # by file descriptor
        self._reports: dict[int, RankReports] = {}  # by the rank's pid
        self._ended: dict[int, tuple[float, LaunchedRank]] = {}  # rank pid -> when it ended, and as whom
        self._refusals: dict[str, int] = {}  # of processes not known as ranks, for the log's pace
        self._cap = MAX_CONNECTIONS
        self._listen_again_at: float | None = None
        self._paused: list[socket.socket] = []  # listeners out of file descriptors stopped for a while
        self._listeners: dict[str, socket.socket] = {}  # by job
        self._lock = threading.Lock()  # `listen` and `unlisten` come from the executor's thread
        self._next_tick = 0.0
        self._fallback: Path | None = None  # the folder of a fresh name it made, removed at close
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        """Serve (no job's socket yet) in `folder`; where its parent is taken (another user made it
        first), in a folder of a fresh name instead, loudly: adopted ranks then lose their channel,
        nothing else. What a previous executor of this state left there is removed."""
        try:
            owned_folder(self.folder.parent)
        except PermissionError as err:
            parent = Path(tempfile.mkdtemp(prefix=f"trainmedic-{os.getuid()}-"))
            os.chmod(parent, 0o711)
            log.error("%s; ranks report in %s instead (ranks adopted from a previous executor cannot "
                      "report until restarted)", err, parent)
            self.folder, self._fallback = parent / self.folder.name, parent
        remove_sockets(self.folder)
        (self.folder.parent / f"{self.folder.name}.sock").unlink(missing_ok=True)  # an older executor's one
        owned_folder(self.folder)
        self._cap = connection_cap()
        self._thread = threading.Thread(target=self._serve, name="trainmedic-rank-reports", daemon=True)
        self._thread.start()
        log.info("ranks report to a socket per job in %s", self.folder)

    def listen(self, job: str, gid: int | None = None) -> Path:
        """The socket `job`'s ranks report to (made at the first call): in a folder that the executor
        and group `gid` (the job's ranks' only group) may enter, 0710; 0700 when None, for ranks of the
        executor's own user. Any thread."""
        with self._lock:
            listener = self._listeners.get(job)
            if listener is not None:
                return Path(listener.getsockname())
            if not self.folder.is_dir():  # removed under it (a tmp cleaner): made again, loudly
                log.warning("the ranks' socket folder %s was removed by something else; made again "
                            "(ranks already running lost their reports channel)", self.folder)
                owned_folder(self.folder.parent)
                owned_folder(self.folder)
            path = job_socket(self.folder, job)
            remove_sockets(path.parent)  # a previous executor's
            path.parent.mkdir(mode=0o700)
            if gid is not None:
                os.chown(path.parent, os.geteuid(), gid)
                os.chmod(path.parent, 0o710)
            listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                listener.bind(str(path))
                os.chmod(path, 0o666)  # the folder says who may connect
                listener.listen(128)
                listener.setblocking(False)
                self._selector.register(listener, selectors.EVENT_READ, job)
            except OSError:
                listener.close()
                raise
            self._listeners[job] = listener
            return path

    def unlisten(self, job: str) -> None:
        """`job` has no rank here any more: its socket and folder go (connections already made are
        read on until their ranks' ENDED_GRACE_S). Any thread."""
        with self._lock:
            listener = self._listeners.pop(job, None)
            if listener is None:
                return
            path = Path(listener.getsockname())
            self._close_listener(listener)
            remove_sockets(path.parent)

    def _close_listener(self, listener: socket.socket) -> None:
        with contextlib.suppress(KeyError, ValueError):
            self._selector.unregister(listener)
        if listener in self._paused:
            self._paused.remove(listener)
        listener.close()

    def forget(self, pid: int, launched: LaunchedRank) -> None:
        """The rank of `pid`, launched as `launched`, ended (any thread, before `resolve` forgets it):
        its connections are read for ENDED_GRACE_S more, those it made before it ended still known as
        its even if no tick identified them yet, then closed and its state dropped, by the server's
        own thread."""
        self._ended[pid] = (self._clock(), launched)

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(5.0)
        for connection in list(self._connections.values()):
            self._drop(connection)
        for job in list(self._listeners):
            self.unlisten(job)
        remove_sockets(self.folder)
        if self._fallback is not None:
            self._fallback.rmdir()
        self._selector.close()

    def _serve(self) -> None:
        while not self._stop.is_set():
            for key, _ in self._selector.select(timeout=0.2):
                with self._lock:
                    self._handle(key)
            with self._lock:
                self._tick()
            self._on_tick()

    def _handle(self, key: selectors.SelectorKey) -> None:
        try:
            if key.data is not None:  # a job's listener (closed since the select: skipped)
                if key.fileobj.fileno() >= 0:
                    self._accept(key.fileobj)
            elif key.fd in self._connections:
                self._read(self._connections[key.fd])
        except Exception:  # a bug must not end every rank's reports
            log.exception("rank reports: unexpected error; the connection is dropped")
            connection = self._connections.get(key.fd)
            if connection is not None:
                self._drop(connection)

    def _tick(self) -> None:
        now = self._clock()
        if now < self._next_tick:  # at most five a second, however busy the socket
            return
        self._next_tick = now + 0.2
        if self._listen_again_at is not None and now >= self._listen_again_at:
            self._listen_again_at = None
            for listener in self._paused:
                job = next(job for job, open_one in self._listeners.items() if open_one is listener)
                self._selector.register(listener, selectors.EVENT_READ, job)
            self._paused.clear()
        for pid, (ended, _) in list(self._ended.items()):
            if now - ended >= ENDED_GRACE_S:
                for connection in [c for c in self._connections.values() if c.rank_pid == pid]:
                    self._drop(connection)
                self._reports.pop(pid, None)
                del self._ended[pid]
        for connection in [c for c in self._connections.values() if c.rank_pid is None]:
            expired = now - connection.since > UNKNOWN_GRACE_S
            if self._identify(connection) and connection.rank_pid is None and expired:
                self._refuse("unknown_process", "not a rank this executor launched, nor one's child",
                             connection.pid)
                self._drop(connection)
            elif connection.closed and connection.rank_pid is not None:  # its lines went on: done
                self._drop(connection)

    def _accept(self, listener: socket.socket) -> None:
        try:
            sock, _ = listener.accept()
        except BlockingIOError:
            return
        except OSError as err:  # out of file descriptors: the listener stays readable, so pause it
            self._selector.unregister(listener)
            self._paused.append(listener)
            self._listen_again_at = self._clock() + ACCEPT_PAUSE_S
            self._refuse("connections", f"cannot accept: {err}", 0)
            return
        pid, uid = peer_credentials(sock)
        refusal = self._no_room(pid, uid)
        if refusal is not None:
            self._refuse("connections", refusal, pid)
            sock.close()
            return
        sock.setblocking(False)
        connection = _Connection(sock, pid, uid, self._clock())
        self._connections[sock.fileno()] = connection
        self._selector.register(sock, selectors.EVENT_READ)
        self._identify(connection)

    def _no_room(self, pid: int, uid: int) -> str | None:
        """Why a new connection of `pid` (of user `uid`) cannot be taken, or None. A process known as
        a rank goes before any other: at the cap, the oldest connection not known as a rank's is
        closed for it. Others may hold MAX_UNKNOWN connections, at most MAX_UNKNOWN_PER_USER a user:
        neither another user nor a stranger reconnecting at once can keep a job's ranks out."""
        unknown = [c for c in self._connections.values() if c.rank_pid is None]
        if rank_of(pid, self._resolve) is not None:
            if len(self._connections) >= self._cap and unknown:
                self._drop(min(unknown, key=lambda c: c.since))
            full = len(self._connections) >= self._cap
            return f"{len(self._connections)} connections are open" if full else None
        if len(self._connections) >= self._cap or len(unknown) >= MAX_UNKNOWN:
            return (f"{len(self._connections)} connections are open ({len(unknown)} of processes not known "
                    "as ranks)")
        if sum(c.uid == uid for c in unknown) >= MAX_UNKNOWN_PER_USER:
            return f"uid {uid} holds {MAX_UNKNOWN_PER_USER} connections of processes not known as ranks"
        return None

    def _identify(self, connection: _Connection) -> bool:
        """Find whose the connection is, and pass on what it held; False if it was closed."""
        found = rank_of(connection.pid, self._resolve)
        ended = self._ended.get(connection.pid)
        if found is None and ended is not None and connection.since <= ended[0]:
            found = connection.pid, ended[1]  # registered and reaped between two ticks
        if found is None:
            return True
        rank_pid, launched = found
        if sum(1 for c in self._connections.values() if c.rank_pid == rank_pid) >= MAX_PER_RANK:
            self._refuse("connections", f"the rank already holds {MAX_PER_RANK} connections", connection.pid)
            self._drop(connection)
            return False
        connection.rank_pid = rank_pid
        reports = self._reports.get(rank_pid)
        if reports is None or reports.launched != launched:  # a new rank, or a pid used again
            self._reports[rank_pid] = RankReports.fresh(launched, self._limits, self._clock())
        held, connection.held, connection.held_bytes = connection.held, [], 0
        for line in held:
            self._line(connection, line)
        return connection.sock.fileno() >= 0

    def _read(self, connection: _Connection) -> None:
        try:
            data = connection.sock.recv(65536)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            data = b""
        if not data:
            if connection.rank_pid is None and connection.held:  # a rank that ended before it was
                with contextlib.suppress(KeyError, ValueError):  # registered: its lines wait for that
                    self._selector.unregister(connection.sock)
                connection.closed = True
                return
            self._drop(connection)
            return
        connection.buffer += data
        while True:
            end = connection.buffer.find(b"\n")
            if end < 0:
                break
            line = bytes(connection.buffer[:end])
            del connection.buffer[:end + 1]
            self._line(connection, line)
            if connection.sock.fileno() < 0:
                return
        if len(connection.buffer) > MAX_LINE:
            self._refuse("oversized", f"a line longer than {MAX_LINE} bytes", connection.pid)
            self._drop(connection)

    def _line(self, connection: _Connection, line: bytes) -> None:
        if connection.rank_pid is None:  # identified on the next tick; what it holds is bounded
            connection.held_bytes += len(line)
            if len(connection.held) >= MAX_HELD_LINES or connection.held_bytes > MAX_LINE:
                self._refuse("unknown_process", "more than a process not known as a rank may hold",
                             connection.pid)
                self._drop(connection)
                return
            connection.held.append(line)
            return
        reports = self._reports.get(connection.rank_pid)
        if reports is None:  # gone with its rank
            self._drop(connection)
            return
        launched = self._resolve(connection.rank_pid)
        if launched is not None and launched != reports.launched:  # kept alive into a new generation
            reports = self._reports[connection.rank_pid] = RankReports.fresh(launched, self._limits,
                                                                             self._clock())
        outcome = check(line, reports, node=self._node, pid=connection.rank_pid, now=self._clock(),
                        limits=self._limits)
        if isinstance(outcome, Refused):
            self._refuse(outcome.label, outcome.reason, connection.pid, reports)
            return
        self._publish(outcome)
        metrics.RANK_REPORTS.labels("published").inc()

    def _refuse(self, label: str, reason: str, pid: int, reports: RankReports | None = None) -> None:
        """Count a refusal; log the 1st, 2nd, 4th, 8th … of a kind (per rank, or of strangers)."""
        metrics.RANK_REPORTS.labels(label).inc()
        counts = self._refusals if reports is None else reports.refused
        seen = counts.get(label, 0)
        counts[label] = seen + 1
        if seen and seen & (seen + 1):
            return
        log.warning("rank report from pid %d refused (%s): %s", pid, label, reason)

    def _drop(self, connection: _Connection) -> None:
        fd = connection.sock.fileno()
        if fd < 0:
            return
        self._connections.pop(fd, None)
        with contextlib.suppress(KeyError, ValueError):
            self._selector.unregister(connection.sock)
        connection.sock.close()
