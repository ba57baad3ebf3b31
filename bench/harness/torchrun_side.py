"""The recovery bench's torchrun side: the demo's training script under `torchrun --standalone
--max-restarts N` on this machine, each fault injected into its workers and timed to the first
step after torchrun restarted them."""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

from harness.recovery_runs import ON_TORCHRUN, USER_SCRIPT, Recovery, Results, say
from trainmedic.demo.faults import arm_rank_fault
from trainmedic.demo.runner import settle
from trainmedic.demo.timeline import Timeline
from trainmedic.demo.watch import wait_for

STEP_LINE = re.compile(r"^step (\d+) loss \S+ gen (\d+) rank \d+ t ([0-9.]+)$")


class TorchrunJob:
    """The demo job under `torchrun --standalone --max-restarts N`, its step lines folded into a Timeline.

    Offers what the demo's Watcher offers (`timeline`, `lock`, `wait_for`), so the demo's
    `settle` and the same measurements apply.
    """

    def __init__(self, root: Path, world_size: int, max_restarts: int, args: argparse.Namespace) -> None:
        self.root = root
        self.world_size = world_size
        self.max_restarts = max_restarts
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
        script = [str(USER_SCRIPT)] if self.args.script == "user" else \
            ["-m", "trainmedic.demo.train", "--snapshot-every", "0"]
        argv = ["nice", "-n", "10", sys.executable, "-m", "torch.distributed.run", "--standalone",
                "--nnodes", "1", "--nproc-per-node", str(self.world_size),
                "--max-restarts", str(self.max_restarts),
                *script, "--steps", "1000000", "--step-s", str(self.args.step_s),
                "--checkpoint-every", "1", "--timeout-s", str(self.args.timeout_s),
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


def torchrun_side(args: argparse.Namespace, root: Path, world_size: int) -> Results:
    """The selected faults torchrun has, each `args.repeat` times, on one torchrun job."""
    names = [f for f in args.faults if f in ON_TORCHRUN]
    if not names:
        return {}
    job = TorchrunJob(root, world_size, args.repeat * len(names) + 1, args)
    try:
        job.start()
        say(f"torchrun: {world_size} workers starting (log in {root / 'torchrun.log'})")
        if not job.wait_for(lambda t: t.current and t.current.last_step >= 10, 180):
            raise RuntimeError(f"torchrun's job did not reach step 10 (log in {root / 'torchrun.log'})")
        last = 2 * args.ranks_per_node - 1  # the rank the demo's kill hits: node-1's last
        injections = {
            "kill": lambda: os.kill(job.worker_pid(last), signal.SIGKILL),
            "raise": lambda: arm_rank_fault(job.fault_file, job.timeline, "crash", rank=last),
            "hang": lambda: arm_rank_fault(job.fault_file, job.timeline, "hang", rank=0),
        }
        results: Results = {}
        for name in names:
            results[name] = []
            for i in range(args.repeat):
                settle(job)
                say(f"torchrun: {name} {i + 1}/{args.repeat}")
                recovery = torchrun_fault(job, injections[name], args.cap_s)
                say(f"torchrun: {name}: first step after {recovery.time_to_step_s}s, "
                    f"{recovery.steps_lost} steps lost")
                results[name].append(recovery)
        return results
    finally:
        job.close()
        say("torchrun stopped")
