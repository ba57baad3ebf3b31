"""Submit a training job, stop one, list the jobs and where they run, show one job's status or its
ranks' logs (docs/coordinator.md#jobs, docs/run.md).

`submit SPEC.yaml` checks the spec and publishes it, signed with the operator key of --keys-dir
(default $TRAINMEDIC_HOME/keys; --insecure: unsigned); the coordinator starts it at generation 0.
`stop JOB` asks the coordinator to stop the job's ranks and free its nodes. `list` folds the log as
the coordinator does; `status JOB` adds the job's progress from worker telemetry. `logs JOB`
prints its ranks' output on this machine; --follow until the job ends (or Ctrl-C). After a
`trainmedic run`, these find its topics without TRAINMEDIC_TOPIC_PREFIX. A spec or a request
that cannot be taken (an unknown job, a missing operator key) is one line on stderr and exit
status 2, and nothing is published.
"""

from __future__ import annotations

import argparse
import getpass
import time
from pathlib import Path

from pydantic import ValidationError

from trainmedic.bus.producer import EventProducer
from trainmedic.bus.reader import NOW, TopicReader
from trainmedic.bus.settings import home
from trainmedic.common.errors import ConfigError
from trainmedic.common.yaml_file import load_mapping
from trainmedic.ops.jobs.checks import command_problem, log_problems, with_workdir
from trainmedic.ops.jobs.states import JobLog, started, state_text
from trainmedic.ops.jobs.view import JobWatch, follow_logs, show_logs, show_status
from trainmedic.ops.keys import add_operator_arguments, operator_key
from trainmedic.ops.prologue import operator_settings, run_command
from trainmedic.recovery.coordinator.cli import COORDINATOR, OPTIONS
from trainmedic.recovery.coordinator.core.job_bounds import job_problems
from trainmedic.recovery.coordinator.intake import listing
from trainmedic.recovery.coordinator.kafka_adapter import read_topics, valid
from trainmedic.recovery.planner.cli import describe
from trainmedic.schemas.jobs import JobSpec, JobStopRequested, JobSubmitted
from trainmedic.schemas.printable import terminal_safe
from trainmedic.schemas.recovery import JobEnded

SPEC_FORMAT = """\
job spec (YAML; see docs/job-example.yaml):
  id: llm-a                      # unique; a second submission of the same id is ignored
  nodes: [n01, n02, n03, n04]    # where it starts; their count must be a throughput size
  pool: [n01, n02, n03, n04, n05]  # optional: the only nodes it may ever run on, its nodes and its
                                 # spares (`trainmedic slurm run` sets it to the allocation's)
  throughput: {2: 5.0e14, 4: 1.0e15, 8: 1.9e15}   # nodes -> FLOP/s, the sizes it can run at
  command: [python, train.py]    # argv of one rank: an executable (absolute, relative to workdir, or
                                 # on PATH), and for python the script (relative to workdir)
  args: [--lr, "3e-4"]           # optional: appended to command
  env: {STEPS: "1000"}           # optional: set in each rank's environment (never a secret: it is
                                 # published; not MASTER_*, RANK, WORLD_SIZE, LOCAL_*, TRAINMEDIC_*)
  workdir: .                     # optional: each rank's directory, relative to this file; default
                                 # this file's directory
  ranks_per_node: 8              # default 1
  master_port: 29500             # default 29500: each generation's rank 0 listens at one of the
                                 # 1,024 ports from here (open them between the job's nodes)
  checkpoint_dir: /ckpt/llm-a    # optional: where a restart restores from without a replica
  weight: 1.0                    # optional: the job's priority in the plan (at most 1000)
  transition_s: 120              # optional: how long a restart of this job costs (at most 86400)
  restart: {max_restarts: 2, backoff_s: [10, 60], window_s: 3600}  # optional: each field defaults to
                                 # the coordinator's max_restarts, restart_backoff_s, restart_window_s
  failure: {hang_floor_s: 600, collective_timeout_s: 300}  # optional: how its failures are found

bounds: throughput at most 1e17 FLOP/s per node, ranks_per_node at most 256, command and args at
most 256 words and 64 KiB; every node one of the cluster's (the coordinator config's nodes:).
Checked before publishing: the id is new (any state), every node was heard from (an executor
there reported) or is in --config's nodes (else --allow-unknown-nodes), the command resolves on
this machine (else --no-local-check, when submitting from a machine without the job's code).
"""

CONFIG_HELP = ("the coordinator's config (YAML): the nodes a job may name are its `nodes:` "
               "(without it, the nodes are checked by the coordinator only)")


ANSWER_WAIT_S = 30.0  # how long `submit --allow-unknown-nodes` waits for the coordinator's answer
PROGRESS_S = 5.0  # and how often it says it still waits


class SpecError(ValueError):
    """A job spec that cannot be submitted, or a stop that cannot be asked; the message is one line."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="action", required=True, metavar="ACTION")
    submit = sub.add_parser("submit", help="check a job spec and submit it",
                            formatter_class=argparse.RawDescriptionHelpFormatter, epilog=SPEC_FORMAT)
    submit.add_argument("spec", type=Path, metavar="SPEC.yaml")
    submit.add_argument("--config", type=Path, metavar="FILE.yaml", help=CONFIG_HELP)
    submit.add_argument("--bootstrap", help="Kafka bootstrap servers (env TRAINMEDIC_KAFKA_BOOTSTRAP)")
    submit.add_argument("--allow-unknown-nodes", action="store_true",
                        help="submit even if a node was never heard from (its executor starts later)")
    submit.add_argument("--wait", type=float, metavar="S",
                        help="wait up to S seconds for the coordinator's answer: started, waiting for "
                             f"nodes, or rejected and why (default: {ANSWER_WAIT_S:g} with "
                             "--allow-unknown-nodes, which this machine cannot check, else 0)")
    submit.add_argument("--no-local-check", action="store_true",
                        help="do not check that the command and script exist on this machine (it does "
                             "not have the job's code)")
    add_operator_arguments(submit)
    stop = sub.add_parser("stop", help="stop a job: its ranks are stopped, its nodes freed; it ends stopped")
    stop.add_argument("job", metavar="JOB")
    stop.add_argument("--reason", default="", help="why, for the log")
    stop.add_argument("--bootstrap", help="Kafka bootstrap servers (env TRAINMEDIC_KAFKA_BOOTSTRAP)")
    stop.add_argument("--config", type=Path, metavar="FILE.yaml",
                      help="the coordinator's config (YAML), to fold the log as it does")
    add_operator_arguments(stop)
    listing = sub.add_parser("list", help="print every job: state, generation, world size, nodes")
    listing.add_argument("--bootstrap", help="Kafka bootstrap servers (env TRAINMEDIC_KAFKA_BOOTSTRAP)")
    listing.add_argument("--config", type=Path, metavar="FILE.yaml",
                         help="the coordinator's config (YAML), to fold the log as it does (without it, "
                              "every node a job names counts as the cluster's)")
    status = sub.add_parser("status", help="one job: state, generation, nodes, step and step rate, restarts, "
                            "steps lost")
    status.add_argument("job", metavar="JOB")
    status.add_argument("--bootstrap", help="Kafka bootstrap servers (env TRAINMEDIC_KAFKA_BOOTSTRAP)")
    status.add_argument("--config", type=Path, metavar="FILE.yaml", help=CONFIG_HELP)
    logs = sub.add_parser("logs", help="the job's rank output on this machine; --follow as it is written")
    logs.add_argument("job", metavar="JOB")
    logs.add_argument("--rank", type=int, metavar="N", help="only this rank (default: all, each line "
                      "prefixed [rank N])")
    logs.add_argument("--follow", "-f", action="store_true",
                      help="keep printing as the ranks write, until the job ends (reads the job's state "
                      "from Kafka) or Ctrl-C")
    logs.add_argument("--home", type=Path, metavar="DIR",
                      help="the TRAINMEDIC_HOME whose ranks' logs to read, in "
                      "HOME-jobs/NODE/JOB/SUBMISSION/logs (default: $TRAINMEDIC_HOME, else ./.trainmedic)")
    logs.add_argument("--bootstrap",
                      help="Kafka bootstrap servers, for --follow and to tell an unknown job from one whose "
                      "logs are elsewhere (env TRAINMEDIC_KAFKA_BOOTSTRAP)")


def load_spec(path: Path, **given: object):
    """The JobSpec in `path` (with the fields `given` in place of its own), or SpecError saying what is
    wrong and where."""
    try:
        document = {**load_mapping(path, "a mapping with id, nodes, throughput and command"), **given}
    except ConfigError as err:
        raise SpecError(str(err)) from None
    try:
        spec = JobSpec.model_validate(document)
    except ValidationError as err:
        raise SpecError(f"{path}: {describe(err)}") from None
    if spec.model_extra:
        raise SpecError(f"{path}: unknown field {sorted(spec.model_extra)[0]!r} "
                        f"(known: {', '.join(JobSpec.model_fields)})")
    if not spec.nodes:
        raise SpecError(f"{path}: nodes: name the nodes the job starts on")
    return spec


def coordinator_config(path: Path | None):
    """The coordinator's config as `trainmedic coordinator --config PATH` builds it (None: no file)."""
    if path is None:
        return None
    try:
        return OPTIONS.build(COORDINATOR, argparse.Namespace(config=path))
    except ConfigError as err:  # a usage error, as a bad spec is
        raise SpecError(f"--config: {err}") from None


def check_command(path: Path, spec) -> None:
    """SpecError when the job's command cannot run in its workdir on this machine."""
    problem = command_problem(spec)
    if problem is not None:
        raise SpecError(f"{path}: {problem} (--no-local-check when this machine does not have the "
                        "job's code)")


def check_log(path: Path, spec, log: JobLog, allow_unknown_nodes: bool) -> None:
    """SpecError when the log already holds the job's id, or names none of its nodes. The id of a
    rejected submission is free: the coordinator never took it."""
    if spec.id in log.rejected:
        log.state.jobs.pop(spec.id, None)  # a fold without the coordinator's config took it
    problems = log_problems(spec, log.state, allow_unknown_nodes)
    if problems:
        raise SpecError(f"{path}: {'; '.join(problems)}")


def check_bounds(path: Path, spec, config) -> None:
    """SpecError when the coordinator would reject `spec`; without its `config`, nodes are not checked."""
    cluster = None if config is None else {node.id for node in config.nodes}
    problems = job_problems(spec, lambda node: cluster is None or node in cluster)
    if problems:
        raise SpecError(f"{path}: the coordinator would reject job {spec.id}: {'; '.join(problems)}")


def run(args: argparse.Namespace) -> int:
    return run_command("job", _run, args, usage=(SpecError,))


def _run(args: argparse.Namespace) -> int:
    if args.action == "logs":
        return logs(args)
    config = coordinator_config(args.config)
    if args.action == "submit":
        spec = with_workdir(load_spec(args.spec), args.spec)
        check_bounds(args.spec, spec, config)
        key = operator_key(args, "trainmedic job")
        if not args.no_local_check:
            check_command(args.spec, spec)
        settings = operator_settings(args, job=spec.id)
        check_log(args.spec, spec, fold_log(settings, config), args.allow_unknown_nodes)
        wait_s = args.wait if args.wait is not None else ANSWER_WAIT_S if args.allow_unknown_nodes else 0.0
        if wait_s > 0:  # the coordinator may refuse what this machine could not check
            return submit_and_wait(settings, spec, config, key, wait_s)
        return submit(settings, spec, key)
    settings = operator_settings(args, job=getattr(args, "job", None))
    if args.action == "stop":
        key = operator_key(args, "trainmedic job")
        return stop(settings, fold_log(settings, config), args.job, args.reason, key)
    if args.action == "status":
        return show_status(settings, fold_log(settings, config), args.job)
    return list_jobs(settings, config)


def logs(args: argparse.Namespace) -> int:
    where = args.home.resolve() if args.home is not None else home()
    settings = operator_settings(args, job=args.job)
    if not args.follow:
        return show_logs(settings, where, args.job, args.rank)
    return follow_logs(settings, where, args.job, args.rank)


def submit(settings, spec, key=None) -> int:
    """Publish `spec`, signed with the operator's `key` (unsigned when None: insecure) for this
    deployment (its topic prefix): a coordinator under another prefix refuses it."""
    event = JobSubmitted(ts=time.time(), job=spec, deployment=settings.topics.prefix)
    if key is not None:
        event = key.sign(event)
    with EventProducer(settings, client_id=settings.topics.owned("job")) as producer:
        producer.send(settings.topics.jobs, event, key=spec.id)
    print(f"submitted job {spec.id}: {len(spec.nodes)} nodes x {spec.ranks_per_node} ranks; "
          f"the coordinator starts it at generation 0")
    return 0


def submit_and_wait(settings, spec, config, key=None, wait_s: float = ANSWER_WAIT_S) -> int:
    """`submit`, then the coordinator's answer within `wait_s` (`await_answer`): 1 when it rejected
    the job, else 0."""
    with JobWatch(settings, config) as watch:
        watch.backlog()  # what was written before: an older rejection of the id is not the answer
        submit(settings, spec, key)
        code, answer = await_answer(watch, spec.id, wait_s)
    print(terminal_safe(answer))
    return code


def await_answer(watch, job: str, wait_s: float, say=print, clock=time.monotonic) -> tuple[int, str]:
    """The coordinator's answer to the submission of `job` just sent, as (exit status, words):
    rejected and why (1), taken (0), or none within `wait_s` (0); a line every PROGRESS_S meanwhile."""
    start = said = clock()
    while (left := start + wait_s - clock()) > 0:
        for record in watch.poll(min(1.0, left)):
            event = record.event
            if isinstance(event, JobEnded) and (event.job, event.state) == (job, "rejected"):
                return 1, f"job {job} rejected by the coordinator: {event.reason}"
        if started(watch.state, job):
            found = watch.state.jobs[job]
            if found.not_started:
                return 0, f"job {job} accepted by the coordinator, not started yet: {found.not_started}"
            return 0, f"job {job} accepted by the coordinator: {found.state} on {' '.join(found.nodes)}"
        if clock() - said >= PROGRESS_S:
            said = clock()
            say(f"waiting for the coordinator's answer ({said - start:.0f} s of {wait_s:.0f} s)")
    return 0, (f"no answer from the coordinator within {wait_s:.0f} s (is it running?); "
               f"`trainmedic job status {job}` shows it once it comes")


def stop(settings, log: JobLog, job_id: str, reason: str, key=None) -> int:
    """Publish a stop of `job_id`, signed with the operator's `key` for this deployment, if the log
    holds it and it has not ended."""
    job = log.displayed(job_id)
    if job is None:
        known = " ".join(sorted(log.state.jobs)[:10]) or "none"
        raise SpecError(f"no job {job_id} in the log (jobs: {known}); `trainmedic job list` shows them")
    if job.closed:
        state = state_text(log, job, time.time())
        raise SpecError(f"job {job_id} already ended ({state}: {job.end_reason}): nothing to stop")
    publish_stop(settings, job_id, reason, key)
    where = (f"stops its ranks on {' '.join(job.nodes)} and frees them" if job.nodes
             else "ends it (no node runs it)")
    print(f"stop of job {job_id} requested ({job.state}): the coordinator {where}; `trainmedic job list` "
          "shows it stopped")
    return 0


def publish_stop(settings, job_id: str, reason: str, key=None) -> None:
    """A stop of `job_id` on the jobs topic, signed with the operator's `key` for this deployment."""
    event = JobStopRequested(ts=time.time(), job=job_id, reason=reason, by=_user(),
                             deployment=settings.topics.prefix)
    if key is not None:
        event = key.sign(event)
    with EventProducer(settings, client_id=settings.topics.owned("job")) as producer:
        producer.send(settings.topics.jobs, event, key=job_id)


def _user() -> str:
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return "operator"


def fold_log(settings, config) -> JobLog:
    """The coordinator's state, folded from the log as it stands now, with the jobs it rejected."""
    topics = settings.topics
    with TopicReader(settings, read_topics(topics), end=NOW, validate=True, name=topics.owned("job"),
                     timeout_s=30.0) as reader:
        records = valid(item for batch in reader.batches(give_up_s=60.0) for item in batch)
    return JobLog.of(listing(records, config, topics.jobs), [record.event for record in records])


def list_jobs(settings, config=None) -> int:
    """One line per job (`job_lines`)."""
    for line in job_lines(fold_log(settings, config), time.time()):
        print(line)
    return 0


def job_lines(log: JobLog, now: float) -> list[str]:
    """A header and one line per job: its state (submitted, starting, running, recovering, with its
    backoff while a restart waits, stopping, queued, failed, succeeded, stopped, rejected),
    generation, world size and nodes, and why a rejected job was."""
    jobs = log.jobs()
    if not jobs:
        return ["no jobs"]
    states = [state_text(log, job, now, long=False) for job in jobs]
    width = max(11, *map(len, states))
    lines = [f"{'JOB':20} {'STATE':{width}} {'GEN':>4} {'WORLD':>6}  NODES"]
    for job, state in zip(jobs, states, strict=True):
        generation = "-" if job.generation is None else str(job.generation)
        world = len(job.nodes) * job.spec.ranks_per_node
        isolated = [n for n in job.nodes if not log.state.healthy(n)]
        note = f"  (isolated: {' '.join(isolated)})" if isolated else ""
        nodes = " ".join(job.nodes)
        if job.spec.id in log.rejected:
            nodes, note = " ".join(job.spec.nodes), f"  ({job.end_reason})"
        line = f"{job.spec.id:20} {state:{width}} {generation:>4} {world:>6}  {nodes}{note}"
        lines.append(terminal_safe(line))
    return lines
