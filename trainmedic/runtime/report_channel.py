"""The hook's channel to its node's executor: one JSON event a line over a local Unix socket; a write that
cannot go through within `timeout_s` drops the event and counts it (docs/producers.md, "The training
hook").
"""

from __future__ import annotations

import logging
import socket
import time
from collections.abc import Callable

from pydantic import BaseModel

from trainmedic.common.drops import DropLedger
from trainmedic.schemas.codec import encode

log = logging.getLogger(__name__)

SOCKET_ENV = "TRAINMEDIC_REPORT_SOCKET"  # set by the executor for its ranks


class ReportChannel:
    """A Sink for `trainmedic.runtime.hook.Hook`: used from the hook's one sender thread."""

    def __init__(self, path: str, *, what: str = "reports", timeout_s: float = 1.0, retry_s: float = 1.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._path = path
        self._what = what
        self._timeout_s = timeout_s
        self._retry_s = retry_s
        self._clock = clock
        self._sock: socket.socket | None = None
        self._retry_at = 0.0
        self.drops = DropLedger()
        self.sent = 0

    @property
    def dropped(self) -> int:
        return self.drops.total

    def send(self, event: BaseModel) -> bool:
        """Write one event; False (and counted) when it could not be."""
        sock = self._connected()
        if sock is None:
            self._drop(1, f"no executor listens at {self._path}")
            return False
        try:
            sock.sendall(encode(event) + b"\n")
        except OSError as err:  # a timeout included: part of a line may be out, so start a new stream
            self._disconnect()
            self._drop(1, f"the executor's socket: {err}")
            return False
        self.sent += 1
        ended = self.drops.delivered()
        if ended:
            log.warning("%s: the executor takes reports again; %d were dropped meanwhile (%d in all)",
                        self._what, ended, self.drops.total)
        return True

    def poll(self) -> None:
        """Nothing to serve: a write is done when `send` returns."""

    def flush(self, timeout_s: float) -> None:
        """Everything sent is written already; close the connection."""
        self._disconnect()
        log.info("%s: %d sent, %d dropped in all", self._what, self.sent, self.dropped)

    def count_dropped(self, count: int, why: str) -> None:
        self._drop(count, why)

    def _connected(self) -> socket.socket | None:
        if self._sock is not None:
            return self._sock
        if self._clock() < self._retry_at:
            return None
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(self._timeout_s)
        try:
            sock.connect(self._path)
        except OSError:
            sock.close()
            self._retry_at = self._clock() + self._retry_s
            return None
        self._sock = sock
        return sock

    def _disconnect(self) -> None:
        if self._sock is not None:
            self._sock.close()
            self._sock = None
            self._retry_at = self._clock() + self._retry_s

    def _drop(self, count: int, why: str) -> None:
        if self.drops.drop(count):
            log.warning("%s: dropping reports rather than waiting for the executor: %s", self._what, why)
