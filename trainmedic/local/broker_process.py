"""How the local broker's process is watched from outside: whether its ports are free or answer, and
what its log says (its start, its last lines)."""

from __future__ import annotations

import socket
from pathlib import Path

__all__ = ["accepts", "port_free", "ready", "tail"]


def port_free(host: str, port: int) -> bool:
    """Nothing listens on `port` of `host` (bound the way Kafka binds, SO_REUSEADDR)."""
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return False
    return True


def accepts(host: str, port: int) -> bool:
    """Something accepts connections on `port` of `host`."""
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as sock:
        sock.settimeout(0.5)
        return sock.connect_ex((host, port)) == 0


def ready(log_file: Path, since: int) -> bool:
    """The broker logs this line once it serves clients (KRaft mode, Kafka 3.x); a cluster's member
    only once a majority of the controllers are up."""
    with open(log_file, "rb") as f:
        f.seek(since)
        return b"Kafka Server started" in f.read()


def tail(path: Path, size: int = 3000) -> str:
    """The log's last `size` bytes."""
    try:
        with open(path, "rb") as f:
            f.seek(max(0, path.stat().st_size - size))
            return f.read().decode("utf-8", "replace")
    except FileNotFoundError:
        return "(no log)"
