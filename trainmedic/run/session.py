"""`trainmedic run`'s one session: a local cluster up, the job submitted, its story printed until it
ends, then everything stopped. Ctrl-C and SIGTERM stop the job (an operator's job_stop) and the rest."""

from __future__ import annotations

import argparse
import logging
import os
import shutil
import signal
import sys
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from pydantic import ValidationError

from trainmedic.bus.producer import EventProducer
from trainmedic.bus.settings import KafkaSettings, credentials_dir, home
from trainmedic.common.errors import TrainmedicError
from trainmedic.local.cluster import (
    ROOT_RANKS,
    ClusterLayout,
    LocalCluster,
    local_deployment,
    rendezvous_base,
)
from trainmedic.ops.jobs.checks import command_problem
from trainmedic.ops.jobs.view import JobWatch
from trainmedic.ops.run_records import record_run
from trainmedic.recovery.coordinator.core.job_bounds import job_problems
from trainmedic.recovery.executor import rank_logs
from trainmedic.recovery.planner.cli import describe
from trainmedic.run.lock import RunBusy, only_run
from trainmedic.run.narrate import RunNarrator
from trainmedic.run.spec import default_job_id, parse_env, run_spec, shell_env, spec_yaml
from trainmedic.schemas.jobs import JobSpec, JobStopRequested
from trainmedic.schemas.printable import terminal_safe

STOP_WAIT_S = 15.0  # how long a stopped job may take to say so before the services stop anyway


class Interrupted(Exception):
    """Ctrl-C or SIGTERM: stop the job and everything started, exit with 128 + the signal."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


def _interrupt(signum: int, _frame: object) -> None:
    raise Interrupted(signum)


def run_job(args: argparse.Namespace) -> int:
    started = time.time()
    # which partitions it reads: not the story
    logging.getLogger("trainmedic.bus.reader").setLevel(logging.WARNING)

    def say(text: str) -> None:
        print(f"[trainmedic {time.time() - started:6.1f}s] {text}", flush=True)

    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    problem = usage_problem(args, command)
    if problem:
        print(f"trainmedic run: {problem}", file=sys.stderr)
        return 2
    job = args.job_id or default_job_id(command, started)
    layout = run_layout(home(), job)
    prefix = args.prefix or f"run-{uuid.uuid4().hex[:6]}."
    try:
        spec = run_spec(job, command, nodes=args.nodes, ranks_per_node=args.nproc_per_node,
                        workdir=Path.cwd(), master_port=rendezvous_base(), env=parse_env(args.env),
                        checkpoint_dir=args.checkpoint_dir, resume=args.resume,
                        max_restarts=args.max_restarts, hang_floor_s=args.hang_floor_s)
    except ValidationError as err:  # an option out of the schema's bounds (e.g. --max-restarts -1)
        print(f"trainmedic run: the options make no valid job: {describe(err)}", file=sys.stderr)
        return 2
    if problem := spec_problem(spec):
        print(f"trainmedic run: {problem}", file=sys.stderr)
        return 2
    previous = {sig: signal.signal(sig, _interrupt) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        with only_run(home(), job), local_deployment(prefix, say) as bootstrap:
            record_run(home(), job, prefix, bootstrap, started)
            # The executors admit the user's own program, its workdir (this directory: a `python -m`
            # job's must be listed) and the variables the user's --env sets; the ranks get this
            # shell's environment, as torchrun's do, less trainmedic's own (docs/run.md)
            passed = shell_env(os.environ)
            admit = ("--allowed-executables", shutil.which(command[0]) or command[0],
                     "--allowed-script-dirs", str(spec.workdir),
                     *(("--job-env", ",".join(spec.env)) if spec.env else ()),
                     *(("--rank-env", ",".join(passed)) if passed else ()))
            cluster = LocalCluster(layout, bootstrap, prefix, spec.nodes, credentials=credentials_dir(),
                                   node_args=admit)
            if os.geteuid() == 0:
                say(ROOT_RANKS)
            try:
                status = supervise(cluster, spec, args, say, started)
            finally:
                for sig in previous:  # a second Ctrl-C must not cut the stop short
                    signal.signal(sig, signal.SIG_IGN)
                say("stopping the services")
                cluster.close()
        say(f"exit status {status} (the job's: 0 succeeded, 1 failed or stopped)")
        return status
    except Interrupted as stop:
        say(f"{stop}: stopped everything; exit status {128 + stop.signum}")
        return 128 + stop.signum
    except RunBusy as err:
        print(f"trainmedic run: {err}", file=sys.stderr)
        return 2
    except (TrainmedicError, RuntimeError) as err:
        say(f"failed: {err}")
        return 1
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def run_layout(root: Path, job: str) -> ClusterLayout:
    """The run's files under `root`/run/JOB, its executors' state where `trainmedic job logs` looks
    (`root`/executor/NODE), and its keys in a folder of its own, `root`/run/keys: the services of a real
    node or coordinator on this machine read `root`/keys live, and must not come to trust the run's."""
    return ClusterLayout(root / "run" / job, root, keys=root / "run" / "keys")


def usage_problem(args: argparse.Namespace, command: list[str]) -> str | None:
    if not command:
        return "name the command each rank runs after --, e.g. trainmedic run --nodes 2 -- python train.py"
    if args.nodes < 1 or args.nproc_per_node < 1:
        return "--nodes and --nproc-per-node must be at least 1"
    try:
        parse_env(args.env)
    except ValueError as err:
        return str(err)
    return None


def spec_problem(spec: JobSpec) -> str | None:
    """Why `spec` cannot run, checked before anything starts as `job submit` checks it: the
    coordinator's bounds, a command or python script that does not resolve in the workdir."""
    if problems := job_problems(spec, lambda node: True):
        return f"the coordinator would refuse job {spec.id}: {'; '.join(problems)}"
    return command_problem(spec)


def supervise(cluster: LocalCluster, spec: JobSpec, args: argparse.Namespace, say, started: float) -> int:
    """Start the services, submit the job and narrate it until it ends; the exit status."""
    layout = cluster.layout
    layout.root.mkdir(parents=True, exist_ok=True)
    cluster.prepare({})
    cluster.start_services()
    say(f"starting the detector, the coordinator and {len(spec.nodes)} nodes (topics {cluster.prefix}*, "
        f"logs in {layout.logs})")
    cluster.wait_ready()
    say(f"services ready after {time.time() - started:.1f} s")
    path = layout.root / "job.yaml"
    path.write_text(spec_yaml(spec))
    settings = KafkaSettings.from_env(role="operator", bootstrap=cluster.bootstrap,
                                      topic_prefix=cluster.prefix)
    key = layout.operator_key()
    narrator = RunNarrator(spec.id, started, args.progress_s, tee=args.tee)

    with JobWatch(settings, extra=(settings.topics.worker,)) as watch, \
            EventProducer(settings, client_id=settings.topics.owned("run")) as producer:
        cluster.submit(producer, settings, spec)
        say(f"submitted job {spec.id}: {len(spec.nodes)} nodes x {spec.ranks_per_node} ranks of "
            f"{' '.join(spec.command)}")
        say(f"job spec: {path} (on a cluster: name its nodes, then `trainmedic job submit {path}`)")
        say(f"rank output: `trainmedic job logs {spec.id} --follow`; status: "
            f"`trainmedic job status {spec.id}` (from any directory)")
        try:
            state = follow(watch, narrator, cluster, say, RankOutput(cluster, spec.id, enabled=args.tee))
        except Interrupted:
            for sig in (signal.SIGINT, signal.SIGTERM):
                signal.signal(sig, signal.SIG_IGN)
            say(f"stopping job {spec.id}")
            producer.send(settings.topics.jobs, key.sign(JobStopRequested(
                ts=time.time(), job=spec.id, reason="trainmedic run was interrupted",
                deployment=settings.topics.prefix)), key=spec.id)
            producer.flush()
            deadline = time.monotonic() + STOP_WAIT_S
            while not watch.over(spec.id) and time.monotonic() < deadline:
                watch.poll(0.5)
            raise
    job = watch.state.jobs[spec.id]
    say(narrator.summary(len(job.restarts)))
    return 0 if state == "succeeded" else 1


@dataclass
class RankOutput:
    """The ranks' output as it is written, each line prefixed with its rank (torchrun's --tee)."""

    cluster: LocalCluster
    job: str
    enabled: bool = True
    tail: rank_logs.Tail = field(default_factory=rank_logs.Tail)

    def show(self, final: bool = False) -> None:
        if not self.enabled:
            return
        lines = self.tail.read(self.cluster.rank_logs(self.job))
        for line in [*lines, *(self.tail.rest() if final else ())]:
            print(terminal_safe(line, keep="\t"), flush=True)


def follow(watch: JobWatch, narrator: RunNarrator, cluster: LocalCluster, say, output: RankOutput) -> str:
    """Narrate until the job ended or the coordinator gave up on it (its state returned), with the ranks'
    output; RuntimeError if a service dies."""
    while True:
        records = watch.poll(0.5)
        output.show()
        now = time.time()
        for record in records:
            published = None if record.timestamp_ms is None else record.timestamp_ms / 1000
            for line in narrator.event(record.event, now, published):
                say(line)
        for line in [*narrator.progress(now), *narrator.job_state(watch.job_state(narrator.job))]:
            say(line)
        if (refused := watch.refused_job(narrator.job)) is not None:
            raise RuntimeError(refused)
        if watch.over(narrator.job):
            output.show(final=True)
            for line in narrator.progress(now, force=True):
                say(line)
            return narrator.state
        for name in cluster.procs:
            cluster.check_alive(name)

