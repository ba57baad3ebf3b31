"""Free local TCP ports for tests that bind a server."""

import socket


def free_port() -> int:
    """A port on 127.0.0.1 that was free a moment ago (the OS picks it)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def pair_free(port: int) -> bool:
    """Whether `port` and `port + 1` (a broker's controller) are both free on loopback, bound as Kafka
    binds (SO_REUSEADDR)."""
    try:
        for candidate in (port, port + 1):
            with socket.socket() as sock:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                sock.bind(("127.0.0.1", candidate))
    except OSError:
        return False
    return True


def free_pairs(count: int, first: int, last: int, apart: int = 2) -> list[int]:
    """`count` ports p in [first, last), at least `apart` from each other, each with p + 1 free too."""
    found: list[int] = []
    for port in range(first, last):
        if len(found) == count:
            break
        if (not found or port >= found[-1] + apart) and pair_free(port):
            found.append(port)
    if len(found) < count:
        raise RuntimeError(f"no {count} free port pairs in {first}-{last}")
    return found
