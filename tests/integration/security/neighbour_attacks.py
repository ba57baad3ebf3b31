"""Issue 42, A4: `wait` is a job's rank that waits; `attack PID HOME` is another job's rank on the same
node that attacks it: ptrace it, read its environment, list its job's directory and plant a file in
its snapshots. Prints what worked, as one JSON line."""

import ctypes
import json
import os
import sys
import time
from pathlib import Path

PTRACE_ATTACH, PTRACE_DETACH = 16, 17

if sys.argv[1] == "wait":
    print(json.dumps({"pid": os.getpid(), "uid": os.getuid(), "gid": os.getgid()}), flush=True)
    time.sleep(60)
    sys.exit(0)

victim, home = int(sys.argv[2]), sys.argv[3]
worked = []
libc = ctypes.CDLL(None, use_errno=True)
if libc.ptrace(PTRACE_ATTACH, victim, None, None) == 0:
    worked.append("ptrace")
    os.waitpid(victim, 0x40000000)  # __WALL: it stops, then goes on
    libc.ptrace(PTRACE_DETACH, victim, None, None)
for name, attempt in (
    ("environ", lambda: Path(f"/proc/{victim}/environ").read_bytes()),
    ("list", lambda: os.listdir(home)),
    ("plant", lambda: Path(home, "snapshots", "planted").write_text("x")),
):
    try:
        attempt()
        worked.append(name)
    except OSError:
        pass
print(json.dumps({"uid": os.getuid(), "worked": worked}), flush=True)
