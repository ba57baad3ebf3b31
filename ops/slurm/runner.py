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
import time
from pathlib import Path

from trainmedic.bus.settings import KafkaSettings
from trainmedic.common.errors import ConfigError, TrainmedicError
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
    """SIGTERM (scancel, the time limit): stop the job and the steps."""


def _cancel(signum: int, _frame: object) -> None:
    raise Cancelled(signal.Signals(signum).name)


def say(text: str) -> None:
    print(f"trainmedic slurm: {text}", flush=True)


def node_steps(allocation: Allocation, args: argparse.Namespace) -> dict[str, subprocess.Popen]:
    """One `srun` per node: `trainmedic slurm node` there, with all the job's resources on it."""
    task = [sys.executable, "-m", "trainmedic.cli", "slurm", "node",
            *(["--home", args.node_home] if args.node_home else []), "--", *args.node_args]
    args.logs.mkdir(parents=True, exist_ok=True)
    steps = {}
    for node in allocation.nodes:
        log = args.logs / f"trainmedic-node-{allocation.job_id}-{node}.log"
        steps[node] = subprocess.Popen(
            ["srun", "--nodes=1", "--ntasks=1", f"--nodelist={node}", "--whole", "--no-kill",
             "--kill-on-bad-exit=0", "--job-name=trainmedic-node", f"--output={log}", *task],
            stdin=subprocess.DEVNULL)
    return steps


def wait_joined(watch: JobWatch, nodes: tuple[str, ...], steps: dict[str, subprocess.Popen],
                timeout_s: float, logs: Path) -> None:
    """Until every node's `trainmedic node` joined (its node_joined read after the start)."""
    waiting, deadline, said = set(nodes), time.monotonic() + timeout_s, time.monotonic()
    while waiting:
        for record in watch.poll(1.0):
            if isinstance(record.event, NodeJoined):
                waiting.discard(record.event.node)
        ended = sorted(node for node in waiting if steps[node].poll() is not None)
        if ended:
            raise TrainmedicError(f"trainmedic node on {', '.join(ended)} exited before it joined: see "
                                  f"{logs}/trainmedic-node-*-{ended[0]}.log")
        if time.monotonic() > deadline:
            raise TrainmedicError(f"trainmedic node on {', '.join(sorted(waiting))} did not join within "
                                  f"{timeout_s:g} s: see their logs in {logs}")
        if time.monotonic() - said > 10:
            said = time.monotonic()
            say(f"waiting for trainmedic node on {', '.join(sorted(waiting))} to join")


def wait_ready(watch: JobWatch, nodes: tuple[str, ...], timeout_s: float) -> None:
    """Until the service on every node joined and the node is ready (not isolated, cordoned, leaving)."""
    deadline, said = time.monotonic() + timeout_s, time.monotonic()
    while waiting := sorted(node for node in nodes if not ready(watch.state, node)):
        if time.monotonic() > deadline:
            known = watch.state.nodes
            states = ", ".join(f"{node} {status(watch.state, node) if node in known else 'unknown'}"
                               for node in waiting)
            raise TrainmedicError(f"trainmedic node is not ready within {timeout_s:g} s on: {states} (is "
                                  "its service running? `trainmedic nodes list`)")
        if time.monotonic() - said > 10:
            said = time.monotonic()
            say(f"waiting for trainmedic node on {', '.join(waiting)}")
        watch.poll(1.0)


def ready(state: ClusterState, node: str) -> bool:
    found = state.nodes.get(node)
    return found is not None and found.joined_ts is not None and status(state, node) == "ready"


def follow(watch: JobWatch, job: str, steps: dict[str, subprocess.Popen]) -> str | None:
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
        for node, step in steps.items():
            if node not in ended and step.poll() is not None:
                ended.add(node)
                say(f"the step on {node} ended (exit {step.returncode}): trainmedic heals the job without it")


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
    nodes, spares = allocation.split(args.spares)
    spec = with_workdir(load_spec(args.spec, nodes=nodes, pool=allocation.nodes), args.spec)
    spec = spec.model_copy(update={"id": allocation.job_name(spec.id)})
    problems = job_problems(spec, lambda _node: True)
    if problems:
        raise ConfigError(f"{args.spec}: {'; '.join(problems)}")
    signal.signal(signal.SIGTERM, _cancel)
    say(f"Slurm job {allocation.job_id}: job {spec.id} on {' '.join(nodes)}"
        + (f", spares {' '.join(spares)}" if spares else ""))
    steps: dict[str, subprocess.Popen] = {}
    submitted = False
    try:
        with JobWatch(settings) as watch:
            watch.backlog()
            if args.daemon_nodes:
                wait_ready(watch, allocation.nodes, args.ready_timeout_s)
            else:
                steps = node_steps(allocation, args)
                wait_joined(watch, allocation.nodes, steps, args.ready_timeout_s, args.logs)
            say(f"trainmedic node ready on all {len(allocation.nodes)} nodes")
            submit(settings, spec, key)
            submitted = True
            code = exit_status(follow(watch, spec.id, steps))
    except Cancelled as why:
        say(f"{why}: stopping job {spec.id} and the node steps")
        if submitted:
            publish_stop(settings, spec.id, f"Slurm job {allocation.job_id} cancelled", key)
        code = 128 + signal.SIGTERM
    except TrainmedicError as err:
        say(str(err))
        code = FAILED
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        stop_steps(steps)
    say(f"exit status {code}")
    return code
