"""A real Slurm on the bed (issue 46): Debian's munge, slurmctld on the control host and one slurmd
per node host, all from files under the bed's root (nothing in /etc, no systemd). What works here:
each daemon started with `nsenter --net` into its host plus `unshare --uts` for the host name
(`ip netns exec` hides the cgroup mounts), `slurmd -N NAME`, nodes named by NodeAddr/NodeHostname,
one munged whose socket every host reaches through the shared filesystem, process tracking by the
process tree (`proctrack/linuxproc`, `task/none`: no cgroup plugin to configure)."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from tests.multihost.bed import Bed, BedError

NEEDS = ("munged", "slurmctld", "slurmd", "sbatch", "scontrol", "sinfo", "unshare")
SLURMD_TIMEOUT_S = 10  # a killed slurmd's node is DOWN 16-20 s later


def unable() -> str | None:
    missing = [tool for tool in NEEDS if shutil.which(tool) is None]
    if missing:
        return (f"the Slurm tests need {', '.join(missing)}: `make test` installs them "
                "(apt-get install slurmctld slurmd slurm-client munge)")
    return None


def config(root: Path, control: str, control_address: str, nodes: dict[str, str],
           scripts: Path | None = None) -> str:
    """slurm.conf for a controller at `control_address` and `nodes` (name -> address); `scripts`: the
    folder of `trainmedic slurm site-files`, whose prolog and epilog every job runs."""
    lines = [
        "ClusterName=tmbed",
        f"SlurmctldHost={control}({control_address})",
        "SlurmUser=root",
        "SlurmdUser=root",
        "AuthType=auth/munge",
        f"AuthInfo=socket={root / 'munge' / 'munge.socket'}",
        f"StateSaveLocation={root / 'ctld'}",
        f"SlurmdSpoolDir={root / 'spool' / '%n'}",
        f"SlurmctldPidFile={root / 'ctld' / 'slurmctld.pid'}",
        f"SlurmdPidFile={root / 'spool' / 'slurmd-%n.pid'}",
        f"SlurmctldLogFile={root / 'logs' / 'slurmctld.log'}",
        f"SlurmdLogFile={root / 'logs' / 'slurmd-%n.log'}",
        "ProctrackType=proctrack/linuxproc",
        "TaskPlugin=task/none",
        "JobAcctGatherType=jobacct_gather/none",
        "AccountingStorageType=accounting_storage/none",
        "MpiDefault=none",
        "SelectType=select/linear",
        "SchedulerType=sched/builtin",
        "ReturnToService=2",
        f"SlurmdTimeout={SLURMD_TIMEOUT_S}",
        "MinJobAge=3600",
        *(f"NodeName={name} NodeAddr={address} NodeHostname={name} CPUs=2 State=UNKNOWN"
          for name, address in nodes.items()),
        f"PartitionName=batch Nodes={','.join(nodes)} Default=YES MaxTime=INFINITE State=UP",
        *([f"Prolog={scripts / 'trainmedic-prolog.sh'}", f"Epilog={scripts / 'trainmedic-epilog.sh'}",
           "PrologFlags=Alloc"] if scripts else []),
    ]
    return "\n".join(lines) + "\n"


@dataclass
class Slurm:
    """munged, slurmctld on `control` and a slurmd on each of `nodes`, on `bed`."""

    bed: Bed
    control: str
    nodes: tuple[str, ...]
    scripts: Path | None = None  # a prolog and an epilog (`trainmedic slurm site-files`)
    root: Path = field(init=False)
    procs: dict[str, subprocess.Popen] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.root = Path(tempfile.mkdtemp(prefix="slurm-", dir=self.bed.root))  # a Slurm of its own per test

    @property
    def env(self) -> dict[str, str]:
        """What a Slurm command needs in its environment (beside the rest)."""
        return {"SLURM_CONF": str(self.root / "slurm.conf")}

    def start(self) -> None:
        for folder in ("munge", "ctld", "spool", "logs"):
            (self.root / folder).mkdir(parents=True, exist_ok=True, mode=0o755)
        self.root.chmod(0o755)
        key = self.root / "munge" / "munge.key"
        key.write_bytes(os.urandom(128))
        key.chmod(0o400)
        addresses = {node: self.bed.hosts[node].address for node in self.nodes}
        (self.root / "slurm.conf").write_text(
            config(self.root, self.control, self.bed.hosts[self.control].address, addresses, self.scripts))
        munge = self.root / "munge"
        self.procs["munged"] = subprocess.Popen(
            ["munged", "--foreground", f"--key-file={key}", f"--socket={munge / 'munge.socket'}",
             f"--pid-file={munge / 'munged.pid'}", f"--log-file={munge / 'munged.log'}",
             f"--seed-file={munge / 'munged.seed'}", "--force"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
        self.wait(lambda: (munge / "munge.socket").exists(), 20, "munged's socket")
        self.daemon(self.control, "slurmctld", ["slurmctld", "-D", "-i"])
        for node in self.nodes:
            self.start_slurmd(node)
        self.wait(lambda: self.states() == {n: "idle" for n in self.nodes}, 60, "every node idle")

    def daemon(self, host: str, name: str, argv: list[str]) -> None:
        """`argv` in `host`'s network and a UTS namespace of its own named `host`."""
        script = f'hostname {host} && exec "$@"'
        self.procs[name] = self.bed.spawn(host, ["unshare", "--uts", "--", "sh", "-c", script, "sh", *argv],
                                          {**os.environ, **self.env}, f"slurm-{name}")

    def start_slurmd(self, node: str) -> None:
        self.daemon(node, f"slurmd-{node}", ["slurmd", "-D", "-N", node])

    def cmd(self, *argv: str, host: str | None = None, timeout: float = 30.0) -> str:
        """A Slurm command run to its end (in `host`'s network, else the machine's); its output."""
        prefix = self.bed.hosts[host].enter if host else []
        done = subprocess.run([*prefix, *argv], env={**os.environ, **self.env}, capture_output=True,
                              text=True, timeout=timeout)
        if done.returncode != 0:
            raise BedError(f"{' '.join(argv)}: exit {done.returncode}: {done.stderr.strip()}")
        return done.stdout

    def states(self) -> dict[str, str]:
        """Node -> its state as sinfo prints it (idle, allocated, down*, draining, drained, ...)."""
        try:
            out = self.cmd("sinfo", "-h", "-N", "-o", "%N %T")
        except BedError:
            return {}
        return dict(line.split() for line in out.splitlines() if line.strip())

    def running(self, job: str) -> bool:
        """Whether Slurm job `job` is pending or running."""
        return bool(self.cmd("squeue", "--noheader", f"--jobs={job}", "--format=%T").strip())

    def reasons(self) -> dict[str, str]:
        """Node -> the reason Slurm holds for its drain or down state."""
        out = self.cmd("sinfo", "-h", "-N", "-R", "-o", "%N|%E")
        return {n: r for n, r in (line.split("|", 1) for line in out.splitlines() if "|" in line)}

    def wait(self, check, timeout_s: float, what: str):
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if value := check():
                return value
            time.sleep(0.2)
        raise BedError(f"timed out after {timeout_s:g}s waiting for {what}; Slurm's logs in "
                       f"{self.root / 'logs'}")

    def close(self) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.kill()
        for proc in self.procs.values():
            proc.wait(10)
