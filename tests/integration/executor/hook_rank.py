"""A rank that reports through the in-band hook and then, as a hostile job would, writes reports
about another job and a far-ahead generation straight to its executor's socket, then raises."""

import json
import os
import socket

from trainmedic.runtime.hook import Hook

hook = Hook.from_env()
hook.started()
hook.step(0, 0.01)
forged = {"type": "worker_error", "ts": 9.0e9, "node": os.environ["TRAINMEDIC_NODE"], "job": "someone-else",
          "rank": 0, "world_size": 1, "generation": 0, "error": "forged"}
ahead = {**forged, "job": os.environ["TRAINMEDIC_JOB"], "generation": 10**15}
with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
    sock.connect(os.environ["TRAINMEDIC_REPORT_SOCKET"])
    sock.sendall(b"".join(json.dumps(report).encode() + b"\n" for report in (forged, ahead)))
with hook.capture():
    raise RuntimeError("boom in a reporting rank")
