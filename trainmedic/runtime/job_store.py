"""The rendezvous store of one generation of a job, which only that generation's ranks can join
(docs/security.md, "The rendezvous: a store only the job can join").

torch's TCPStore serves anyone who reaches its port: a stranger could read and write a job's keys,
or listen on the port first and have the ranks join it. This store's server (in rank 0) and every
client prove to each other, before anything else, that they hold the generation's key (the
coordinator's per-generation secret in the rank contract): HMAC-SHA256 over both sides' fresh
nonces. A connection that cannot prove it is closed before it reads or writes a key, and a rank
never uses a server that cannot prove it. The server listens on the job's address only, at the
generation's port (also the coordinator's, derived from the same secret).

Frames are a 4-byte length and a msgpack list; requests are `[op, *args]`, answers `[value]`.
The server is one thread with a selector, so a rank's training threads are not touched; a `get` or
`wait` for keys not there yet is parked and answered when they are set.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import os
import selectors
import socket
import struct
import threading
import time
from collections import deque
from contextlib import suppress
from dataclasses import dataclass, field
from datetime import timedelta

import msgspec
import torch.distributed as dist

log = logging.getLogger(__name__)

HELLO = b"trainmedic-store/1"
NONCE = 32
HANDSHAKE_MAX = 256  # bytes of a frame before a connection proved the key
MAX_FRAME = 64 << 20  # a value gloo or NCCL exchanges is far smaller
HANDSHAKE_S = 5.0  # a connection that has not proved the key in this long is closed
MAX_STRANGERS = 64  # connections not yet proved at once; the oldest goes when one more comes
_LENGTH = struct.Struct(">I")
_encode = msgspec.msgpack.Encoder().encode
_decode = msgspec.msgpack.Decoder().decode


class StoreRefused(dist.DistStoreError):
    """The server at the generation's address did not prove the generation's key (a stranger's,
    or another generation's), or closed the connection before it did."""


def _mac(key: bytes, side: bytes, nonce_s: bytes, nonce_c: bytes) -> bytes:
    return hmac.new(key, side + nonce_s + nonce_c, hashlib.sha256).digest()


def _frame(value: object) -> bytes:
    body = _encode(value)
    return _LENGTH.pack(len(body)) + body


# ---------------------------------------------------------------------------------------------
# The server: rank 0's thread.


@dataclass(eq=False)
class _Conn:
    sock: socket.socket
    nonce: bytes
    opened: float
    proved: bool = False
    inbox: bytearray = field(default_factory=bytearray)
    outbox: bytearray = field(default_factory=bytearray)


@dataclass(eq=False)
class _Parked:
    conn: _Conn
    op: str
    keys: tuple[str, ...]


class StoreServer:
    """Serves one generation's keys to the connections that prove `key`; `close()` ends it."""

    def __init__(self, listener: socket.socket, key: bytes, clock=time.monotonic) -> None:
        self._listener = listener
        self._key = key
        self._clock = clock
        self._data: dict[str, bytes] = {}
        self._parked: dict[str, list[_Parked]] = {}
        self._strangers: deque[_Conn] = deque()
        self._selector = selectors.DefaultSelector()
        self._wake_r, self._wake_w = socket.socketpair()
        self._stop = False
        listener.setblocking(False)
        self._selector.register(listener, selectors.EVENT_READ, None)
        self._selector.register(self._wake_r, selectors.EVENT_READ, "wake")
        self._thread = threading.Thread(target=self._serve, name="trainmedic-store", daemon=True)
        self._thread.start()

    @property
    def port(self) -> int:
        return self._listener.getsockname()[1]

    def close(self) -> None:
        if self._stop:
            return
        self._stop = True
        with suppress(OSError):  # the thread may have ended already
            self._wake_w.send(b"x")
        self._thread.join(timeout=5.0)

    def _serve(self) -> None:
        try:
            while not self._stop:
                for ready, mask in self._selector.select(timeout=1.0):
                    if ready.data is None:
                        self._accept()
                    elif ready.data != "wake":
                        self._ready(ready.data, mask)
                self._expire_strangers()
        finally:
            for key in list(self._selector.get_map().values()):
                key.fileobj.close()
            self._selector.close()
            self._wake_w.close()

    def _accept(self) -> None:
        try:
            sock, _ = self._listener.accept()
        except OSError as err:  # none after all, or out of descriptors: the server goes on
            if not isinstance(err, (BlockingIOError, InterruptedError)):
                log.warning("store: cannot accept a connection: %s", err)
            return
        sock.setblocking(False)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        conn = _Conn(sock, os.urandom(NONCE), self._clock())
        if len(self._strangers) >= MAX_STRANGERS:
            self._drop(self._strangers.popleft())
        self._strangers.append(conn)
        conn.outbox += _frame([HELLO, conn.nonce])
        self._selector.register(sock, selectors.EVENT_READ | selectors.EVENT_WRITE, conn)

    def _expire_strangers(self) -> None:
        while self._strangers and self._clock() - self._strangers[0].opened > HANDSHAKE_S:
            self._drop(self._strangers.popleft())

    def _ready(self, conn: _Conn, mask: int) -> None:
        try:
            if mask & selectors.EVENT_READ:
                chunk = conn.sock.recv(1 << 16)
                if not chunk:  # closed by its end: what a rank does when it leaves
                    self._drop(conn)
                    return
                conn.inbox += chunk
                self._frames(conn)
            self._flush(conn)
        except Exception as err:  # whatever one connection sent, only it is dropped
            if conn.proved:
                log.warning("store: a connection of the job dropped: %s", err)
            self._drop(conn)

    def _frames(self, conn: _Conn) -> None:
        while len(conn.inbox) >= _LENGTH.size:
            (size,) = _LENGTH.unpack_from(conn.inbox)
            if size > (MAX_FRAME if conn.proved else HANDSHAKE_MAX):
                raise ValueError(f"a frame of {size} bytes")
            if len(conn.inbox) < _LENGTH.size + size:
                return
            message = _decode(bytes(conn.inbox[_LENGTH.size:_LENGTH.size + size]))
            del conn.inbox[:_LENGTH.size + size]
            if conn.proved:
                self._request(conn, message)
            else:
                self._prove(conn, message)

    def _prove(self, conn: _Conn, message: object) -> None:
        nonce_c, mac = message if isinstance(message, list) and len(message) == 2 else (b"", b"")
        if not (isinstance(nonce_c, bytes) and len(nonce_c) == NONCE and isinstance(mac, bytes)
                and hmac.compare_digest(mac, _mac(self._key, b"client", conn.nonce, nonce_c))):
            raise ValueError("the connection did not prove the generation's key")
        conn.proved = True
        self._strangers.remove(conn)
        conn.outbox += _frame([_mac(self._key, b"server", conn.nonce, nonce_c)])

    def _request(self, conn: _Conn, message: object) -> None:
        if not isinstance(message, list) or not message or not isinstance(message[0], str):
            raise ValueError("not a request")
        op, args = message[0], message[1:]
        handler = getattr(self, f"_op_{op}", None)
        if handler is None:
            raise ValueError(f"unknown op {op!r}")
        handler(conn, *args)

    def _answer(self, conn: _Conn, value: object) -> None:
        conn.outbox += _frame([value])

    def _flush(self, conn: _Conn) -> None:
        if conn.outbox:
            sent = conn.sock.send(conn.outbox)
            del conn.outbox[:sent]
        events = selectors.EVENT_READ | (selectors.EVENT_WRITE if conn.outbox else 0)
        self._selector.modify(conn.sock, events, conn)

    def _drop(self, conn: _Conn) -> None:
        with suppress(OSError, KeyError, ValueError):
            self._selector.unregister(conn.sock)
        conn.sock.close()
        if conn in self._strangers:
            self._strangers.remove(conn)
        for waiters in self._parked.values():
            waiters[:] = [p for p in waiters if p.conn is not conn]

    def _put(self, key: str, value: bytes) -> None:
        self._data[key] = value
        for parked in self._parked.pop(key, []):
            self._unpark(parked)

    def _unpark(self, parked: _Parked) -> None:
        missing = next((k for k in parked.keys if k not in self._data), None)
        if missing is not None:
            self._parked.setdefault(missing, []).append(parked)
            return
        values = [self._data[k] for k in parked.keys]
        answer = None if parked.op == "wait" else values if parked.op == "mget" else values[0]
        self._answer(parked.conn, answer)
        with suppress(OSError, KeyError, ValueError):
            self._flush(parked.conn)

    def _op_set(self, conn: _Conn, key: str, value: bytes) -> None:
        self._put(key, value)
        self._answer(conn, None)

    def _op_mset(self, conn: _Conn, keys: list[str], values: list[bytes]) -> None:
        for key, value in zip(keys, values, strict=True):
            self._put(key, value)
        self._answer(conn, None)

    def _op_append(self, conn: _Conn, key: str, value: bytes) -> None:
        self._put(key, self._data.get(key, b"") + value)
        self._answer(conn, None)

    def _op_get(self, conn: _Conn, key: str) -> None:
        self._unpark(_Parked(conn, "get", (key,)))

    def _op_mget(self, conn: _Conn, keys: list[str]) -> None:
        self._unpark(_Parked(conn, "mget", tuple(keys)))

    def _op_wait(self, conn: _Conn, keys: list[str]) -> None:
        self._unpark(_Parked(conn, "wait", tuple(keys)))

    def _op_add(self, conn: _Conn, key: str, amount: int) -> None:
        total = int(self._data.get(key, b"0")) + amount
        self._put(key, str(total).encode())
        self._answer(conn, total)

    def _op_cas(self, conn: _Conn, key: str, expected: bytes, desired: bytes) -> None:
        current = self._data.get(key)
        if (current is None and not expected) or current == expected:
            self._put(key, desired)
            current = desired
        self._answer(conn, expected if current is None else current)

    def _op_check(self, conn: _Conn, keys: list[str]) -> None:
        self._answer(conn, all(k in self._data for k in keys))

    def _op_delete(self, conn: _Conn, key: str) -> None:
        self._answer(conn, self._data.pop(key, None) is not None)

    def _op_num(self, conn: _Conn) -> None:
        self._answer(conn, len(self._data))


# ---------------------------------------------------------------------------------------------
# The client: every rank's dist.Store.


class JobStore(dist.Store):
    """A `dist.Store` on a connection to the generation's server, proved both ways; one request at
    a time (a lock), a new connection after a timeout."""

    def __init__(self, addr: str, port: int, key: bytes, timeout: timedelta,
                 server: StoreServer | None = None) -> None:
        super().__init__()
        self._addr, self._port, self._key = addr, port, key
        self._timeout = timeout
        self._server = server  # rank 0's: it lives as long as this store
        self._lock = threading.Lock()
        self._sock: socket.socket | None = None
        self._connect()

    def close(self) -> None:
        with self._lock:
            self._hang_up()
        if self._server is not None:
            self._server.close()

    # --- dist.Store
    def set(self, key: str, value: str | bytes) -> None:
        self._call("set", key, _bytes(value))

    def get(self, key: str) -> bytes:
        return self._call("get", key)

    def add(self, key: str, amount: int) -> int:
        return self._call("add", key, int(amount))

    def compare_set(self, key: str, expected: str | bytes, desired: str | bytes) -> bytes:
        return self._call("cas", key, _bytes(expected), _bytes(desired))

    def check(self, keys: list[str]) -> bool:
        return self._call("check", list(keys))

    def wait(self, keys: list[str], timeout: timedelta | None = None) -> None:
        self._call("wait", list(keys), timeout=timeout)

    def delete_key(self, key: str) -> bool:
        return self._call("delete", key)

    def num_keys(self) -> int:
        return self._call("num")

    def multi_get(self, keys: list[str]) -> list[bytes]:
        return self._call("mget", list(keys))

    def multi_set(self, keys: list[str], values: list[str | bytes]) -> None:
        self._call("mset", list(keys), [_bytes(v) for v in values])

    def append(self, key: str, value: str | bytes) -> None:
        self._call("append", key, _bytes(value))

    def set_timeout(self, timeout: timedelta) -> None:
        self._timeout = timeout

    @property
    def timeout(self) -> timedelta:
        return self._timeout

    # --- the connection
    def _connect(self) -> None:
        sock = socket.create_connection((self._addr, self._port), timeout=self._timeout.total_seconds())
        try:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            hello = _read_frame(sock, HANDSHAKE_MAX)
            if not (isinstance(hello, list) and len(hello) == 2 and hello[0] == HELLO
                    and isinstance(hello[1], bytes) and len(hello[1]) == NONCE):
                raise StoreRefused(f"{self._addr}:{self._port} is not a trainmedic store")
            nonce_s, nonce_c = hello[1], os.urandom(NONCE)
            sock.sendall(_frame([nonce_c, _mac(self._key, b"client", nonce_s, nonce_c)]))
            proof = _read_frame(sock, HANDSHAKE_MAX)
            if not (isinstance(proof, list) and len(proof) == 1 and isinstance(proof[0], bytes)
                    and hmac.compare_digest(proof[0], _mac(self._key, b"server", nonce_s, nonce_c))):
                raise StoreRefused(f"the store at {self._addr}:{self._port} did not prove this "
                                   "generation's key")
        except (OSError, ValueError, msgspec.DecodeError) as err:
            sock.close()
            raise StoreRefused(f"the store at {self._addr}:{self._port} did not prove this generation's "
                               f"key ({err or type(err).__name__})") from None
        except BaseException:
            sock.close()
            raise
        self._sock = sock

    def _hang_up(self) -> None:
        if self._sock is not None:
            self._sock.close()
            self._sock = None

    def _call(self, op: str, *args: object, timeout: timedelta | None = None) -> object:
        limit = (timeout or self._timeout).total_seconds()
        with self._lock:
            if self._sock is None:
                self._connect()
            try:
                self._sock.settimeout(limit)
                self._sock.sendall(_frame([op, *args]))
                (value,) = _read_frame(self._sock, MAX_FRAME)
            except TimeoutError:
                self._hang_up()  # an answer may still come: never read it as the next one's
                raise dist.DistStoreError(f"Timed out waiting {limit:g}s for the store ({op} "
                                          f"{args[0] if args else ''})") from None
            except (OSError, ValueError, msgspec.DecodeError) as err:
                self._hang_up()
                raise dist.DistStoreError(f"the store at {self._addr}:{self._port} is gone ({op}: "
                                          f"{err or type(err).__name__})") from None
            except BaseException:  # a signal's handler raised mid-answer: never read it as the next one's
                self._hang_up()
                raise
        return value


def _bytes(value: str | bytes) -> bytes:
    return value.encode() if isinstance(value, str) else bytes(value)


def _read_frame(sock: socket.socket, limit: int) -> object:
    (size,) = _LENGTH.unpack(_read_exactly(sock, _LENGTH.size))
    if size > limit:
        raise ValueError(f"a frame of {size} bytes")
    return _decode(_read_exactly(sock, size))


def _read_exactly(sock: socket.socket, size: int) -> bytes:
    chunks, left = [], size
    while left:
        chunk = sock.recv(min(left, 1 << 20))
        if not chunk:
            raise ConnectionError("the store closed the connection")
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def listen(addr: str, port: int) -> socket.socket:
    """The generation's listening socket on the job's address as it resolves here (IPv4 or IPv6),
    never every interface."""
    family, kind, proto, _, where = socket.getaddrinfo(addr, port, type=socket.SOCK_STREAM)[0]
    sock = socket.socket(family, kind, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(where)
        sock.listen(1024)
    except BaseException:
        sock.close()
        raise
    return sock
