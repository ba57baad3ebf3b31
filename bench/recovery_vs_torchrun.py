"""Recovery from a killed and from a hung rank: trainmedic side by side with torchrun --max-restarts.

Both sides run the same job (trainmedic.demo.train, gloo on CPU, the same world size
and step time) on this machine, one after the other, with the same two faults:

  killed rank  kill -9 of one rank's process (the demo's: node-1's last rank; torchrun: the same rank)
  hung rank    rank 0 stops stepping, its process alive (the rank-fault file, armed 3 steps ahead)

trainmedic is the demo's cluster (trainmedic.demo: broker, detector, coordinator, one
`trainmedic node` per node) with the demo's faults; it restores from node-local snapshots
taken every step. torchrun is `torchrun --standalone --max-restarts 3` (with
TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1, without which its restarts fail), restarting every
worker and restoring from a checkpoint written every step; it notices a hang only when the
peers' collective times out (`--timeout-s`). Per fault: the time from the injection to the
first step any rank completes after the restart, and the completed steps the restarted job
ran again, both from the job's timeline (telemetry for trainmedic, the ranks' stdout lines
for torchrun).

    python bench/recovery_vs_torchrun.py [--nodes 2] [--ranks-per-node 2] [--step-s 0.25] [--json OUT]

Uses TRAINMEDIC_KAFKA_BOOTSTRAP's broker when set, else starts and stops the local one.
Files and logs go to $TRAINMEDIC_HOME/bench-recovery/ (emptied at the start).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

from trainmedic.bus.settings import home
from trainmedic.demo.cluster import DemoLayout
from trainmedic.demo.faults import arm_hang, run_fault
from trainmedic.demo.runner import faults, running_job, settle
from trainmedic.demo.timeline import Timeline
from trainmedic.demo.watch import wait_for

FAULTS = ("kill", "hang")  # the demo's names for the two faults compared here
STEP_LINE = re.compile(r"^step (\d+) loss \S+ gen (\d+) rank \d+ t ([0-9.]+)$")
STARTED = time.monotonic()


def say(text: str) -> None:
    print(f"[bench {time.monotonic() - STARTED:6.1f}s] {text}", flush=True)


@dataclass(frozen=True)
class Recovery:
    """One fault's cost: seconds from the injection to the first completed step after the restart,
    and completed steps run again; both None when the job did not step again within the cap."""

    time_to_step_s: float | None
    steps_lost: int | None


def trainmedic_side(args: argparse.Namespace, root: Path) -> tuple[dict[str, Recovery], list[dict]]:
    """The demo's cluster and job, the demo's kill and hang faults; also the demo's full rows."""
    results: dict[str, Recovery] = {}
    rows = []
    with running_job(args, DemoLayout(root), say) as (cluster, watcher):
        for fault in faults(cluster.nodes):
            if fault.name not in FAULTS:
                continue
            settle(watcher)
            say(f"trainmedic: injecting {fault.name}")
            row = run_fault(fault, cluster, watcher, args.cap_s)
            say(f"trainmedic: {fault.name}: incident {row.category} -> {row.action}, first step after "
                f"{row.time_to_resume_s}s, {row.steps_lost} steps lost")
            results[fault.name] = Recovery(row.time_to_resume_s, row.steps_lost)
            rows.append(row.as_dict())
    return results, rows


class TorchrunJob:
    """The demo job under `torchrun --standalone --max-restarts 3`, its step lines folded into a Timeline.

    Offers what the demo's Watcher offers (`timeline`, `lock`, `wait_for`), so the demo's
    `settle` and the same measurements apply.
    """

    def __init__(self, root: Path, world_size: int, args: argparse.Namespace) -> None:
        self.root = root
        self.world_size = world_size
        self.args = args
        self.timeline = Timeline("torchrun")
        self.lock = threading.Lock()
        self.proc: subprocess.Popen | None = None
        self._reader: threading.Thread | None = None

    @property
    def fault_file(self) -> Path:
        return self.root / "rank-faults.json"

    def start(self) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        self.fault_file.write_text("[]")
        env = {k: v for k, v in os.environ.items() if not k.startswith("TRAINMEDIC_")}
        env.update(TRAINMEDIC_CHECKPOINT_DIR=str(self.root / "checkpoints"),
                   TRAINMEDIC_RESTORE=json.dumps({"kind": "checkpoint"}), PYTHONUNBUFFERED="1",
                   # With the agent's shared TCP store (the default since torch 2.5) the restarted
                   # workers read the previous generation's gloo addresses and never connect
                   # (pytorch/pytorch#135712; seen here with torch 2.15): the documented opt-out.
                   TORCH_DISABLE_SHARE_RDZV_TCP_STORE="1")
        # nice, like the demo's ranks; torch.distributed.run is the torchrun command.
        argv = ["nice", "-n", "10", sys.executable, "-m", "torch.distributed.run", "--standalone",
                "--nnodes", "1", "--nproc-per-node", str(self.world_size), "--max-restarts", "3",
                "-m", "trainmedic.demo.train", "--steps", "1000000", "--step-s", str(self.args.step_s),
                "--snapshot-every", "0", "--checkpoint-every", "1", "--timeout-s", str(self.args.timeout_s),
                "--fault-file", str(self.fault_file)]
        # Its own session, so that everything it starts can be ended as one process group.
        self.proc = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL, start_new_session=True)
        self._reader = threading.Thread(target=self._read, name="torchrun-stdout", daemon=True)
        self._reader.start()

    def wait_for(self, condition: Callable[[Timeline], object], timeout_s: float) -> object:
        """Poll `condition(timeline)` until it is truthy (returned) or the timeout passes (None)."""
        return wait_for(self.lock, self.timeline, condition, timeout_s, check=self._check_alive)

    def _check_alive(self) -> None:
        if self.proc.poll() is not None:
            raise RuntimeError(f"torchrun exited with {self.proc.returncode} "
                               f"(log in {self.root / 'torchrun.log'})")

    def worker_pid(self, rank: int) -> int:
        """The pid of the worker with RANK=`rank`: a child of torchrun's agent (found through /proc)."""
        for stat in Path("/proc").glob("[0-9]*/stat"):
            try:
                ppid = int(stat.read_text().rsplit(")", 1)[1].split()[1])
                environ = (stat.parent / "environ").read_bytes().split(b"\0") if ppid == self.proc.pid else []
                if f"RANK={rank}".encode() in environ:
                    return int(stat.parent.name)
            except (OSError, ValueError, IndexError):
                continue  # the process ended while we looked, or is not ours to read
        raise RuntimeError(f"no torchrun worker with RANK={rank}")

    def close(self) -> None:
        """SIGTERM to torchrun and its workers; SIGKILL to what is left after 30 s."""
        if self.proc is None:
            return
        _signal_group(self.proc.pid, signal.SIGTERM)
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            say("torchrun did not stop within 30s; killing it")
        _signal_group(self.proc.pid, signal.SIGKILL)
        self.proc.wait()
        self._reader.join(10)

    def _read(self) -> None:
        with (self.root / "torchrun.log").open("w") as log:
            for line in self.proc.stdout:
                text = line.decode(errors="replace")
                log.write(text)
                match = STEP_LINE.match(text.strip())
                if match:
                    step, gen, ts = int(match[1]), int(match[2]), float(match[3])
                    with self.lock:
                        self.timeline.stepped(gen, self.world_size, step, ts)


def _signal_group(pgid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError):  # everything in the group has ended
        os.killpg(pgid, sig)


def torchrun_fault(job: TorchrunJob, inject: Callable[[], None], cap_s: float) -> Recovery:
    """Inject, then wait for the first step of a later generation (a restart), as `run_fault` does."""
    with job.lock:
        before = job.timeline.generation
        inject()
    injected = time.time()
    after = job.wait_for(lambda t: t.generation if t.generation > before else None, cap_s)
    if after is None:
        return Recovery(None, None)
    with job.lock:
        return Recovery(round(job.timeline.generations[after].first_step_ts - injected, 2),
                        job.timeline.steps_lost(before, after))


def torchrun_side(args: argparse.Namespace, root: Path, world_size: int) -> dict[str, Recovery]:
    job = TorchrunJob(root, world_size, args)
    try:
        job.start()
        say(f"torchrun: {world_size} workers starting (log in {root / 'torchrun.log'})")
        if not job.wait_for(lambda t: t.current and t.current.last_step >= 10, 180):
            raise RuntimeError(f"torchrun's job did not reach step 10 (log in {root / 'torchrun.log'})")
        killed = 2 * args.ranks_per_node - 1  # the rank the demo's kill fault hits: node-1's last
        injections = {
            "kill": lambda: os.kill(job.worker_pid(killed), signal.SIGKILL),
            "hang": lambda: arm_hang(job.fault_file, job.timeline, rank=0),
        }
        results = {}
        for name in FAULTS:
            settle(job)
            say(f"torchrun: injecting {name}")
            results[name] = torchrun_fault(job, injections[name], args.cap_s)
            say(f"torchrun: {name}: first step after {results[name].time_to_step_s}s, "
                f"{results[name].steps_lost} steps lost")
        return results
    finally:
        job.close()
        say("torchrun stopped")


def table(args: argparse.Namespace, world_size: int, results: dict[str, dict[str, Recovery]],
          load: dict[str, tuple[float, ...]]) -> str:
    def cells(r: Recovery) -> list[str]:
        to_step = f"> {args.cap_s:g}" if r.time_to_step_s is None else f"{r.time_to_step_s:.1f}"
        return [to_step, "-" if r.steps_lost is None else str(r.steps_lost)]

    header = [["", "trainmedic", "", "torchrun", ""],
              ["fault", "first step s", "steps lost", "first step s", "steps lost"]]
    names = {"kill": "killed rank", "hang": "hung rank"}
    rows = [[names[f], *cells(results["trainmedic"][f]), *cells(results["torchrun"][f])] for f in FAULTS]
    widths = [max(len(row[i]) for row in header + rows) for i in range(5)]
    lines = ["  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip()
             for row in header + rows]
    return "\n".join([
        f"world size {world_size} (trainmedic: {args.nodes} nodes x {args.ranks_per_node} ranks; torchrun: "
        f"--nproc-per-node {world_size} --max-restarts 3), step {args.step_s:g} s, gloo on CPU",
        f"torchrun collective timeout (--timeout-s) {args.timeout_s:g} s; cap per fault {args.cap_s:g} s",
        *lines,
        "load average 1/5/15 min: " + "; ".join(
            f"{when} {' '.join(f'{x:.2f}' for x in avg)}" for when, avg in load.items()),
        f"cores: {os.cpu_count()}",
    ])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes", type=int, default=2, help="trainmedic's simulated nodes (default 2)")
    parser.add_argument("--ranks-per-node", type=int, default=2, help="ranks per node (default 2)")
    parser.add_argument("--step-s", type=float, default=0.25, help="one step, s (default 0.25, the demo's)")
    parser.add_argument("--timeout-s", type=float, default=60.0,
                        help="torchrun workers' collective timeout, which is what ends a hang (default 60)")
    parser.add_argument("--cap-s", type=float, default=120.0,
                        help="longest wait for the first step after a fault (default 120)")
    parser.add_argument("--json", type=Path, help="also write the numbers here")
    args = parser.parse_args(argv)
    if args.nodes < 2 or args.ranks_per_node < 1:
        parser.error("needs at least 2 nodes and 1 rank per node")
    world_size = args.nodes * args.ranks_per_node
    root = home() / "bench-recovery"
    shutil.rmtree(root, ignore_errors=True)

    load = {"start": os.getloadavg()}
    trainmedic, rows = trainmedic_side(args, root / "trainmedic")
    load["after trainmedic"] = os.getloadavg()
    torchrun = torchrun_side(args, root / "torchrun", world_size)
    load["after torchrun"] = os.getloadavg()

    results = {"trainmedic": trainmedic, "torchrun": torchrun}
    print()
    print(table(args, world_size, results, load))
    if args.json:
        args.json.write_text(json.dumps({
            "world_size": world_size, "nodes": args.nodes, "ranks_per_node": args.ranks_per_node,
            "step_s": args.step_s, "torchrun_timeout_s": args.timeout_s, "cap_s": args.cap_s,
            "cores": os.cpu_count(), "load_average": load,
            "results": {side: {f: asdict(r) for f, r in by_fault.items()}
                        for side, by_fault in results.items()},
            "trainmedic_faults": rows,
        }, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
