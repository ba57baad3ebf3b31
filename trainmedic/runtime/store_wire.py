"""The wire of a generation's store (job_store.py): frames are a 4-byte length and a msgpack list;
requests are `[op, *args]`, answers `[value]`. Before any request, server and client prove to each other
that they hold the generation's key: HMAC-SHA256 over both sides' fresh nonces.
"""

from __future__ import annotations

import hashlib
import hmac
import socket
import struct

import msgspec
import torch.distributed as dist

HELLO = b"trainmedic-store/1"
NONCE = 32
HANDSHAKE_MAX = 256  # bytes of a frame before a connection proved the key
MAX_FRAME = 64 << 20  # a value gloo or NCCL exchanges is far smaller
LENGTH = struct.Struct(">I")
encode = msgspec.msgpack.Encoder().encode
decode = msgspec.msgpack.Decoder().decode


class StoreRefused(dist.DistStoreError):
    """The server at the generation's address did not prove the generation's key (a stranger's,
    or another generation's), or closed the connection before it did."""


def sign_nonces(key: bytes, side: bytes, nonce_s: bytes, nonce_c: bytes) -> bytes:
    return hmac.new(key, side + nonce_s + nonce_c, hashlib.sha256).digest()


def frame(value: object) -> bytes:
    body = encode(value)
    return LENGTH.pack(len(body)) + body


def read_frame(sock: socket.socket, limit: int) -> object:
    (size,) = LENGTH.unpack(read_exactly(sock, LENGTH.size))
    if size > limit:
        raise ValueError(f"a frame of {size} bytes")
    return decode(read_exactly(sock, size))


def read_exactly(sock: socket.socket, size: int) -> bytes:
    chunks, left = [], size
    while left:
        chunk = sock.recv(min(left, 1 << 20))
        if not chunk:
            raise ConnectionError("the store closed the connection")
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)
