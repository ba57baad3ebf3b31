"""The server of a generation's store: one thread with a selector in rank 0, so a rank's training
threads are not touched. A connection that does not prove the generation's key (store_wire.py) in
HANDSHAKE_S is closed having read and written nothing; a `get` or `wait` for keys not there yet is
parked and answered when they are set.
"""

from __future__ import annotations

import hmac
import logging
import os
import selectors
import socket
import threading
import time
from collections import deque
from contextlib import suppress
from dataclasses import dataclass, field

from trainmedic.runtime.store_wire import (
    HANDSHAKE_MAX,
    HELLO,
    LENGTH,
    MAX_FRAME,
    NONCE,
    decode,
    frame,
    sign_nonces,
)

log = logging.getLogger(__name__)

HANDSHAKE_S = 5.0  # a connection that has not proved the key in this long is closed
MAX_STRANGERS = 64  # connections not yet proved at once; the oldest goes when one more comes


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
        conn.outbox += frame([HELLO, conn.nonce])
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
        while len(conn.inbox) >= LENGTH.size:
            (size,) = LENGTH.unpack_from(conn.inbox)
            if size > (MAX_FRAME if conn.proved else HANDSHAKE_MAX):
                raise ValueError(f"a frame of {size} bytes")
            if len(conn.inbox) < LENGTH.size + size:
                return
            message = decode(bytes(conn.inbox[LENGTH.size:LENGTH.size + size]))
            del conn.inbox[:LENGTH.size + size]
            if conn.proved:
                self._request(conn, message)
            else:
                self._prove(conn, message)

    def _prove(self, conn: _Conn, message: object) -> None:
        nonce_c, mac = message if isinstance(message, list) and len(message) == 2 else (b"", b"")
        if not (isinstance(nonce_c, bytes) and len(nonce_c) == NONCE and isinstance(mac, bytes)
                and hmac.compare_digest(mac, sign_nonces(self._key, b"client", conn.nonce, nonce_c))):
            raise ValueError("the connection did not prove the generation's key")
        conn.proved = True
        self._strangers.remove(conn)
        conn.outbox += frame([sign_nonces(self._key, b"server", conn.nonce, nonce_c)])

    def _request(self, conn: _Conn, message: object) -> None:
        if not isinstance(message, list) or not message or not isinstance(message[0], str):
            raise ValueError("not a request")
        op, args = message[0], message[1:]
        handler = getattr(self, f"_op_{op}", None)
        if handler is None:
            raise ValueError(f"unknown op {op!r}")
        handler(conn, *args)

    def _answer(self, conn: _Conn, value: object) -> None:
        conn.outbox += frame([value])

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
