"""Each generation's rendezvous (docs/security.md, "The rendezvous: a store only the job can join"): a
secret that the generation's ranks and rank 0's store prove to each other, and a port derived from
it, so that no one without the coordinator's root key can join the store, nor know where to wait for
it. Both are functions of the root, the job, its submission and the generation: every command of a
generation carries the same ones, and a coordinator that restarts with the same key derives them
again.
"""

from __future__ import annotations

import hashlib
import hmac

PORTS = 1024  # a generation's port is one of [the job's master_port, master_port + PORTS)


def rendezvous(root: bytes, job: str, submission: str, generation: int, base_port: int) -> tuple[str, int]:
    """The generation's secret (hex) and port."""
    secret = hmac.new(root, "\x1f".join((job, submission, str(generation))).encode(), hashlib.sha256)
    span = min(PORTS, 65536 - base_port)
    offset = int.from_bytes(hmac.new(secret.digest(), b"port", hashlib.sha256).digest()[:4], "big")
    return secret.hexdigest(), base_port + offset % span
