"""The rendezvous store of one generation of a job, which only that generation's ranks can join
(docs/security.md, "The rendezvous: a store only the job can join").

torch's TCPStore serves anyone who reaches its port: a stranger could read and write a job's keys,
or listen on the port first and have the ranks join it. This store's server (in rank 0) and every
client prove to each other, before anything else, that they hold the generation's key (the
coordinator's per-generation secret in the rank contract): HMAC-SHA256 over both sides' fresh
nonces. A connection that cannot prove it is closed before it reads or writes a key, and a rank
never uses a server that cannot prove it. The server listens on the job's address only, at the
generation's port (also the coordinator's, derived from the same secret).

This module is the client every rank (rank 0 too) uses; store_server.py is rank 0's server and
store_wire.py the frames and proofs both speak.
"""

from __future__ import annotations

import hmac
import os
import socket
import threading
from datetime import timedelta

import msgspec
import torch.distributed as dist

from trainmedic.runtime.store_server import StoreServer
from trainmedic.runtime.store_wire import (
    HANDSHAKE_MAX,
    HELLO,
    MAX_FRAME,
    NONCE,
    StoreRefused,
    frame,
    read_frame,
    sign_nonces,
)


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
            hello = read_frame(sock, HANDSHAKE_MAX)
            if not (isinstance(hello, list) and len(hello) == 2 and hello[0] == HELLO
                    and isinstance(hello[1], bytes) and len(hello[1]) == NONCE):
                raise StoreRefused(f"{self._addr}:{self._port} is not a trainmedic store")
            nonce_s, nonce_c = hello[1], os.urandom(NONCE)
            sock.sendall(frame([nonce_c, sign_nonces(self._key, b"client", nonce_s, nonce_c)]))
            proof = read_frame(sock, HANDSHAKE_MAX)
            if not (isinstance(proof, list) and len(proof) == 1 and isinstance(proof[0], bytes)
                    and hmac.compare_digest(proof[0], sign_nonces(self._key, b"server", nonce_s, nonce_c))):
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
                self._sock.sendall(frame([op, *args]))
                (value,) = read_frame(self._sock, MAX_FRAME)
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
