"""`trainmedic slurm run SPEC`, the batch script's one command: a `trainmedic node` on every node of the
allocation, each a Slurm step of its own (a node lost ends its step, not the others: `--no-kill`), then
the job submitted on all nodes but the spares and followed until it ends; the exit status says how
(`allocation.exit_status`). Ranks are the executors' children, so inside the steps: Slurm's cgroup,
accounting and GPU binding. scancel (SIGTERM) stops the job and the steps."""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import threading
import time

from trainmedic.bus.settings import KafkaSettings
from trainmedic.common.errors import ConfigError, TrainmedicError
from trainmedic.common.signals import stop_on_signals
from trainmedic.ops.jobs.checks import with_workdir
from trainmedic.ops.jobs.cli import load_spec, publish_stop, submit
from trainmedic.ops.jobs.view import JobWatch
from trainmedic.ops.slurm.allocation import FAILED, Allocation, exit_status
from trainmedic.recovery.coordinator.core.job_bounds import job_problems
from trainmedic.recovery.coordinator.core.lifecycle import status
from trainmedic.recovery.coordinator.core.state import ClusterState
from trainmedic.schemas.commands import NodeJoined
from trainmedic.schemas.printable import terminal_safe
from trainmedic.schemas.recovery import JobEnded, RecoveryPlanned

STEP_STOP_S = 30.0  # how long the steps get to stop after SIGTERM before srun is killed


class Cancelled(Exception):
    """SIGTERM or SIGINT (scancel, the time limit), seen at a point where stopping is safe."""


def say(text: str) -> None:
    print(f"trainmedic slurm: {text}", flush=True)


def node_steps(allocation: Allocation, args: argparse.Namespace, steps: dict[str, subprocess.Popen]) -> None:
    """One `srun` per node into `steps`: `trainmedic slurm node` there, with all the job's resources."""
    task = [sys.executable, "-m", "trainmedic.cli", "slurm", "node",
            *(["--home", args.node_home] if args.node_home else []), "--", *args.node_args]
    args.logs.mkdir(parents=True, exist_ok=True)
    for node in allocation.nodes:
        log = args.logs / f"trainmedic-node-{allocation.job_id}-{node}.log"
        steps[node] = subprocess.Popen(
            ["srun", "--nodes=1", "--ntasks=1", f"--nodelist={node}", "--whole", "--no-kill",
             "--kill-on-bad-exit=0", "--job-name=trainmedic-node", f"--output={log}", *task],
            stdin=subprocess.DEVNULL)


def wait_up(watch: JobWatch, allocation: Allocation, need: int, steps: dict[str, subprocess.Popen],
            args: argparse.Namespace, cancel: threading.Event) -> list[str]:
    """The allocation's nodes whose `trainmedic node` is up (joined since this started, or, for daemon
    nodes, ready), once all are or `--ready-timeout-s` passed with at least `need` of them."""
    joined: set[str] = set()
    deadline, said = time.monotonic() + args.ready_timeout_s, time.monotonic()
    while True:
        for record in watch.poll(1.0):
            if isinstance(record.event, NodeJoined):
                joined.add(record.event.node)
        if cancel.is_set():
            raise Cancelled
        up = [node for node in allocation.nodes
              if (ready(watch.state, node) if args.daemon_nodes else node in joined)]
        ended = [node for node in allocation.nodes if node not in up and node in steps
                 and steps[node].poll() is not None]
        waiting = [node for node in allocation.nodes if node not in up and node not in ended]
        if not waiting or (time.monotonic() > deadline and len(up) >= need):
            for node in sorted(set(allocation.nodes) - set(up)):
                why = "its step ended" if node in ended else "not ready"
                say(f"trainmedic node on {node} is not up ({why}): the job goes on without it (see "
                    f"{args.logs} for its log)")
            if len(up) < need:
                raise TrainmedicError(f"trainmedic node is up on {len(up)} of the {need} nodes the job needs")
            return up
        if time.monotonic() > deadline:
            raise TrainmedicError(f"trainmedic node is not up within {args.ready_timeout_s:g} s on "
                                  f"{', '.join(waiting)}: see their logs in {args.logs} and `trainmedic "
                                  "nodes list`")
        if time.monotonic() - said > 10:
            said = time.monotonic()
            say(f"waiting for trainmedic node on {', '.join(waiting)}")


def ready(state: ClusterState, node: str) -> bool:
    found = state.nodes.get(node)
    return found is not None and found.joined_ts is not None and status(state, node) == "ready"


def follow(watch: JobWatch, job: str, steps: dict[str, subprocess.Popen], cancel: threading.Event) -> str:
    """Narrate the job's plans and lost steps until it ends; its final state."""
    ended: set[str] = set()
    while True:
        for record in watch.poll(1.0):
            event = record.event
            if isinstance(event, RecoveryPlanned) and event.job == job:
                say(f"generation {event.generation}: {event.kind} on {' '.join(event.nodes)}")
            elif isinstance(event, JobEnded) and event.job == job:
                say(terminal_safe(f"job {job} {event.state}" + (f": {event.reason}" if event.reason else "")))
                return event.state
        if cancel.is_set():
            raise Cancelled
        for node, step in steps.items():
            if node not in ended and step.poll() is not None:
                ended.add(node)
                say(f"the step on {node} ended (exit {step.returncode}): trainmedic heals the job without it")
        if steps and len(ended) == len(steps):
            raise TrainmedicError("every node's step ended: the job cannot run on this allocation any more")


def stop_steps(steps: dict[str, subprocess.Popen]) -> None:
    for step in steps.values():
        if step.poll() is None:
            step.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + STEP_STOP_S
    for step in steps.values():
        try:
            step.wait(max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            step.kill()
            step.wait()


def run_in_allocation(args: argparse.Namespace, settings: KafkaSettings, key) -> int:
    allocation = Allocation.from_env(os.environ)
    nodes = allocation.split(args.spares)[0]  # the rest wait as spares
    spec = with_workdir(load_spec(args.spec, nodes=nodes, pool=allocation.nodes), args.spec)
    spec = spec.model_copy(update={"id": allocation.job_name(spec.id)})
    problems = job_problems(spec, lambda _node: True)
    if problems:
        raise ConfigError(f"{args.spec}: {'; '.join(problems)}")
    say(f"Slurm job {allocation.job_id}: job {spec.id} on {len(nodes)} of {' '.join(allocation.nodes)}")
    steps: dict[str, subprocess.Popen] = {}
    submitted = False
    cancel = threading.Event()
    try:
        with stop_on_signals(cancel), JobWatch(settings) as watch:
            watch.backlog()
            if spec.id in watch.state.jobs:
                raise TrainmedicError(f"job {spec.id} is in the log already (a Slurm job id used again?): "
                                      "its id is taken")
            if not args.daemon_nodes:
                node_steps(allocation, args, steps)
            up = wait_up(watch, allocation, len(nodes), steps, args, cancel)
            spec = spec.model_copy(update={"nodes": tuple(up[: len(nodes)])})
            say(f"trainmedic node up on {' '.join(up)}; job {spec.id} starts on {' '.join(spec.nodes)}"
                + (f", spares {' '.join(up[len(nodes):])}" if len(up) > len(nodes) else ""))
            submitted = True  # before the send: a cancel during it still stops the job
            submit(settings, spec, key)
            code = exit_status(follow(watch, spec.id, steps, cancel))
    except Cancelled:
        say(f"cancelled: stopping job {spec.id} and the node steps")
        if submitted:
            publish_stop(settings, spec.id, f"Slurm job {allocation.job_id} cancelled", key)
        code = 128 + signal.SIGTERM
    except TrainmedicError as err:
        say(str(err))
        if submitted:
            publish_stop(settings, spec.id, f"Slurm job {allocation.job_id}'s batch script: {err}", key)
        code = FAILED
    finally:
        stop_steps(steps)
    say(f"exit status {code}")
    return code
