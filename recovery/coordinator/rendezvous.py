"""Each generation's rendezvous, sealed into the commands that launch it: a secret that the
generation's ranks and rank 0's store prove to each other, and a port derived from it, so that no one
without the secret can join the store, nor know where to wait for it (docs/security.md, "The
rendezvous: a store only the job can join").

Both are derived from the coordinator's signing key, the job, its submission and the generation:
every command of a generation carries the same ones, a coordinator that restarts derives them
again, and no other party can. An insecure coordinator (no signing key) derives them from a key
of its own process.
"""

from __future__ import annotations

import hashlib
import hmac
import os
from dataclasses import dataclass

from cryptography.hazmat.primitives.serialization import Encoding, NoEncryption, PrivateFormat

from trainmedic.recovery.signing import SigningKey
from trainmedic.schemas.commands import Command

PORTS = 1024  # a generation's port is one of [the job's master_port, master_port + PORTS)


@dataclass(frozen=True)
class Rendezvous:
    root: bytes

    @classmethod
    def of(cls, signing: SigningKey | None) -> Rendezvous:
        if signing is None:
            return cls(os.urandom(32))
        raw = signing.private.private_bytes(Encoding.Raw, PrivateFormat.Raw, NoEncryption())
        return cls(hmac.new(raw, b"trainmedic rendezvous", hashlib.sha256).digest())

    def seal(self, command: Command) -> Command:
        """`command` with its generation's secret and port; as it is when it launches nothing or
        was sealed already (a re-send)."""
        worker = command.worker
        if worker is None or worker.rendezvous_key is not None:
            return command
        secret = hmac.new(self.root, "\x1f".join((command.job, worker.submission or "",
                                                  str(command.generation))).encode(), hashlib.sha256)
        span = min(PORTS, 65536 - worker.master_port)
        offset = int.from_bytes(hmac.new(secret.digest(), b"port", hashlib.sha256).digest()[:4], "big")
        return command.model_copy(update={"worker": worker.model_copy(update={
            "master_port": worker.master_port + offset % span, "rendezvous_key": secret.hexdigest()})})
