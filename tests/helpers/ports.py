"""Free local TCP ports for tests that bind a server."""

import socket


def free_port() -> int:
    """A port on 127.0.0.1 that was free a moment ago (the OS picks it)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]
