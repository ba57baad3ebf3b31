"""What a site that runs `trainmedic node` as a daemon installs once per node (docs/slurm.md, "A node
service"): its systemd unit, and the Slurm prolog and epilog that tell it which job owns the node."""

from __future__ import annotations

import shlex
from collections.abc import Sequence

OWNER_FILE = "/run/trainmedic/slurm-job"
HOME = "/var/lib/trainmedic"
STOP_S = 90  # systemd's stop timeout: `trainmedic node`'s leave (60 s by default) and its ranks' stop


def unit(trainmedic: Sequence[str], node_args: Sequence[str], owner_file: str = OWNER_FILE,
         home: str = HOME) -> str:
    start = shlex.join([*trainmedic, "node", "--slurm-owner-file", owner_file, *node_args])
    start = start.replace("%", "%%").replace("$", "$$")  # systemd's specifiers and variables: literal
    return f"""\
# trainmedic-node.service, written by `trainmedic slurm site-files` (docs/slurm.md).
[Unit]
Description=trainmedic node: host agent, GPU producer and executor
Wants=network-online.target
After=network-online.target munge.service slurmd.service

[Service]
Environment=TRAINMEDIC_HOME={home}
ExecStart={start}
# Only trainmedic node is signalled: its ranks are not the unit's to kill. A crash, or a restart by
# `systemctl kill --signal=SIGKILL trainmedic-node` (an upgrade), leaves them training, and the next
# start adopts them from its ledger in TRAINMEDIC_HOME. `systemctl stop` (SIGTERM) is a planned
# shutdown: the node leaves, the coordinator moves its jobs, then its ranks stop.
KillMode=process
Restart=on-failure
RestartSec=2
TimeoutStopSec={STOP_S}

[Install]
WantedBy=multi-user.target
"""


def shell_path(path: str) -> str:
    """`path` as one shell word, `{node}` in it the node's name (where several slurmd share a host)."""
    return '"$SLURMD_NODENAME"'.join(shlex.quote(part) if part else "" for part in path.split("{node}"))


def prolog(owner_file: str = OWNER_FILE) -> str:
    folder = shell_path(owner_file.rpartition("/")[0] or "/")
    owner = shell_path(owner_file)
    return f"""\
#!/bin/sh
# Slurm Prolog (slurm.conf: Prolog=THIS, PrologFlags=Alloc), written by `trainmedic slurm site-files`:
# run as root on each node a job is allocated, it tells trainmedic node which job owns the node, so that
# ranks start only for that job's trainmedic jobs. Nodes are allocated whole (exclusive).
set -eu
case "$SLURM_JOB_ID" in ''|*[!0-9]*) echo "trainmedic prolog: no SLURM_JOB_ID" >&2; exit 1;; esac
umask 022
dir={folder}
mkdir -p "$dir"
# a folder only root may write (no link): what trainmedic node trusts, and no one can swap files in
case "$(stat -c %u:%A "$dir")" in
  0:d????-??-?) ;;
  *) echo "trainmedic prolog: $dir is not a folder only root may write" >&2; exit 1;;
esac
tmp=$(mktemp "$dir/.owner.XXXXXX")
printf '%s %s\\n' "$SLURM_JOB_ID" "${{SLURM_JOB_USER:-}}" > "$tmp"
chmod 644 "$tmp"
mv -f "$tmp" {owner}
"""


def epilog(owner_file: str = OWNER_FILE) -> str:
    owner = shell_path(owner_file)
    return f"""\
#!/bin/sh
# Slurm Epilog (slurm.conf: Epilog=THIS), written by `trainmedic slurm site-files`: the job's end takes
# the node from it (only if it still owns it: a later job's prolog may have run already).
owner=$(cut -d' ' -f1 {owner} 2>/dev/null || true)
if [ "$owner" = "$SLURM_JOB_ID" ]; then rm -f {owner}; fi
exit 0
"""
