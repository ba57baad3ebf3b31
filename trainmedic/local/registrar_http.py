"""The registrar's HTTPS front: `GET /ca` (the broker's CA, the bytes a join token pins), `GET /keys`
(the coordinator and operator keys the broker's host trusts, and the ids it revoked), `POST /join` (a
node's registration) and `POST /host` (a control-plane host's join), each body at most 64 KiB, served
with the broker's own certificate. Every answer is JSON but the CA's; a request that fails never stops
the server, and tells the peer only an error id (`answered`). At most `MAX_CONNECTIONS` are served at
once (one more is closed unanswered), and a peer has `DEADLINE_S` in all to send its request, however
slowly its bytes come.
"""

from __future__ import annotations

import io
import json
import logging
import socket
import ssl
import sys
import threading
import time
import uuid
from collections.abc import Callable, Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from trainmedic.local.enrollments import MAX_BODY

log = logging.getLogger("trainmedic.registrar")

Join = Callable[[bytes, str], tuple[int, dict]]  # (body, peer) -> (status, JSON answer)
Keys = Join  # (no body, peer) -> (status, the key directory as JSON)
TIMEOUT_S = 10.0  # one read (the TLS handshake included) or one write of a connection
DEADLINE_S = 15.0  # the handshake, the request line, its headers and its body together
MAX_CONNECTIONS = 16  # served at once, a thread each
FULL_LOG_S = 60.0  # connections closed for want of a thread are said this often at most


def answered(request: str, answer: Join, body: bytes, peer: str) -> tuple[int, dict]:
    """`answer(body, peer)`; a failure of it is a 500 that carries only an error id, its detail logged
    with that id: one bad request never stops the registrar, and never tells a peer its inside."""
    try:
        return answer(body, peer)
    except Exception:
        error = uuid.uuid4().hex[:12]
        log.exception("registrar: %s from %s failed (error %s)", request, peer, error)
        return 500, {"error": f"the registrar failed (error {error}): the registrar's log on the broker's "
                              "host says why"}


def tls_context(cert: Path, key: Path) -> ssl.SSLContext:
    """A server context of the broker's certificate (its chain) and key, TLS 1.2 at least."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.load_cert_chain(cert, key)
    return context


class RegistrarServer(ThreadingHTTPServer):
    """A thread per connection; the TLS handshake is made in that thread, not in the one accepting."""

    daemon_threads = True
    request_queue_size = 64

    def __init__(self, address: tuple[str, int], context: ssl.SSLContext, ca_pem: bytes,
                 posts: Mapping[str, Join], keys: Keys, max_connections: int = MAX_CONNECTIONS) -> None:
        super().__init__(address, _Handler)
        self.socket = context.wrap_socket(self.socket, server_side=True, do_handshake_on_connect=False)
        self.ca_pem = ca_pem
        self.posts = posts  # path (/join, /host) -> what answers it
        self.keys = keys
        self.max_connections = max_connections
        self._slots = threading.BoundedSemaphore(max_connections)
        self._full_said = -FULL_LOG_S

    def process_request(self, request, client_address) -> None:  # noqa: ANN001 (socketserver's signature)
        """A thread for the connection if one of the slots is free; else it is closed at once."""
        if not self._slots.acquire(blocking=False):
            if time.monotonic() - self._full_said >= FULL_LOG_S:
                self._full_said = time.monotonic()
                log.warning("registrar: %d connections are served already: closing those beyond (from %s "
                            "first; said again in a minute at most)", self.max_connections, client_address[0])
            self.shutdown_request(request)
            return
        try:
            super().process_request(request, client_address)
        except BaseException:
            self._slots.release()
            raise

    def process_request_thread(self, request, client_address) -> None:  # noqa: ANN001
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._slots.release()

    def handle_error(self, request, client_address) -> None:  # noqa: ANN001 (socketserver's signature)
        log.warning("registrar: a connection from %s failed: %s", client_address[0], sys.exc_info()[1])


class _Handler(BaseHTTPRequestHandler):
    server: RegistrarServer
    timeout = TIMEOUT_S
    server_version = "trainmedic-registrar"
    sys_version = ""

    def setup(self) -> None:
        deadline = time.monotonic() + DEADLINE_S
        super().setup()
        self.connection.do_handshake()  # a failed handshake raises: handle_error logs it
        self.rfile.close()  # makefile's: every read now goes through the deadline
        self.rfile = io.BufferedReader(_Until(self.connection, deadline))

    def do_GET(self) -> None:  # noqa: N802 (http.server's name)
        if self.path == "/ca":
            self._send(200, "application/x-pem-file", self.server.ca_pem)
        elif self.path == "/keys":
            self._json(*answered("GET /keys", self.server.keys, b"", self.client_address[0]))
        else:
            self._json(404, {"error": f"no such resource: GET /ca or /keys ({self.path[:80]!r})"})

    def do_POST(self) -> None:  # noqa: N802
        answer = self.server.posts.get(self.path)
        if answer is None:
            self._json(404, {"error": f"no such resource: POST /join or /host ({self.path[:80]!r})"})
            return
        try:
            length = int(self.headers.get("Content-Length", ""))
        except ValueError:
            self._json(411, {"error": "a registration needs its Content-Length"})
            return
        if not 0 <= length <= MAX_BODY:
            self.close_connection = True
            self._json(413, {"error": f"the registration is {length} bytes, at most {MAX_BODY}"})
            return
        body = self.rfile.read(length)
        self._json(*answered(f"POST {self.path}", answer, body, self.client_address[0]))

    def _json(self, status: int, answer: dict) -> None:
        self._send(status, "application/json", json.dumps(answer).encode())

    def _send(self, status: int, kind: str, body: bytes) -> None:
        self.send_response(status)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002 (http.server's name)
        log.debug("registrar: %s %s", self.client_address[0], format % args)


class _Until(io.RawIOBase):
    """A connection's bytes until `deadline` (time.monotonic()): each read waits at most what is left
    of it, then raises TimeoutError (which http.server answers by closing the connection)."""

    def __init__(self, connection: socket.socket, deadline: float) -> None:
        self._connection = connection
        self._deadline = deadline

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:  # noqa: ANN001 (io's signature: a writable buffer)
        left = self._deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError(f"the request took more than {DEADLINE_S:g}s")
        self._connection.settimeout(min(TIMEOUT_S, left))
        return self._connection.recv_into(buffer)


def serve_in_thread(server: RegistrarServer) -> threading.Thread:
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.5},
                              name="registrar-https", daemon=True)
    thread.start()
    return thread
