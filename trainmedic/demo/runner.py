"""The demo's script: set up, start the job, inject each fault, report, tear down."""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import re
import shutil
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from trainmedic.bus.settings import KafkaSettings, credentials_dir, home
from trainmedic.common.errors import TrainmedicError
from trainmedic.demo import losses, observe
from trainmedic.demo.alerts_watch import AlertWatch
from trainmedic.demo.cluster import DemoLayout
from trainmedic.demo.faults import (
    DemoFault,
    FaultResult,
    gpu_fault,
    hang_rank,
    kill_rank,
    link_flap,
    run_fault,
)
from trainmedic.demo.grow import run_grow
from trainmedic.demo.watch import Watcher
from trainmedic.local import ops_stack
from trainmedic.local.cluster import ROOT_RANKS, LocalCluster, free_port, local_deployment, rendezvous_base
from trainmedic.schemas import JobSpec

JOB = "demo"
# The demo's detector: the defaults, with a hang floor that fits a 0.25 s step, and a GPU fault
# resolved after 10 s of its node's clean samples (not 60 s), so the repaired node rejoins sooner.
DETECTOR_CONFIG = {"hang": {"floor_s": 10.0}, "gpu": {"healthy_s": 10.0}}
# What a gpt-* rank imports besides torch (FSDP2, DCP, and dynamo, which torch.optim loads): ranks
# forked warm skip a second or more of CPU each.
GPT_PRELOAD = ("torch.distributed.fsdp", "torch.distributed.checkpoint.state_dict", "torch._dynamo")
# The prefixes demos generate: a run deletes the topics of earlier ones (never a user's "demo-orders").
DEMO_PREFIX = re.compile(r"demo-[0-9a-f]{6}\.")
STARTED = time.monotonic()


def say(text: str) -> None:
    print(f"[demo {time.monotonic() - STARTED:6.1f}s] {text}", flush=True)


def faults(nodes: tuple[str, ...]) -> list[DemoFault]:
    return [
        DemoFault("kill", "process_exit", "restart", kill_rank(JOB, nodes[1]), lambda w: w),
        # A node in the middle, so the survivors after it are renumbered and must still restore
        # from the snapshots they wrote under their old ranks.
        DemoFault("xid79", "gpu_lost", "reconfigure", gpu_fault(nodes[1], "xid=79,gpu=0"),
              lambda w: w - w // len(nodes)),
        DemoFault("hang", "hang", "restart", hang_rank(rank=0), lambda w: w),
        DemoFault("flap", "link_flap", "reattempt", link_flap(nodes[0], "ib0", for_s=2.0), lambda w: w),
    ]


def run_demo(args: argparse.Namespace) -> int:
    if args.nodes < 2 or args.ranks_per_node < 1:
        print("trainmedic demo: needs at least 2 nodes and 1 rank per node", file=sys.stderr)
        return 2
    if problem := world_problem(args):
        print(f"trainmedic demo: {problem}", file=sys.stderr)
        return 2
    layout = DemoLayout(home() / "demo")
    stop_progress = threading.Event()
    stack = None
    try:
        alertmanager = args.alertmanager
        if args.observe:
            stack, alertmanager = observed(args, home() / "observe")
        with running_job(args, layout, alertmanager=alertmanager,
                         metrics_ports=stack and stack.metrics_ports) as (cluster, watcher):
            threading.Thread(target=progress, args=(watcher, cluster, stop_progress), daemon=True).start()
            alerts = AlertWatch(alertmanager) if alertmanager else None
            if alerts is not None:
                alerts.start()
            results: list[FaultResult] = []
            for fault in faults(cluster.nodes):
                if args.only and fault.name not in args.only:
                    continue
                settle(watcher)
                say(f"FAULT {fault.name}: injecting (expect {fault.expected_category} -> {fault.action})")
                result = run_fault(fault, cluster, watcher, args.fault_timeout_s)
                results.append(result)
                say(f"FAULT {fault.name}: {'healed' if result.healed else 'NOT healed'} "
                    f"(first step {result.time_to_resume_s}s after the fault, "
                    f"{result.steps_lost} steps lost)")
            xid = next((r for r in results if r.name == "xid79"), None)
            if xid is not None and (not args.only or "grow" in args.only):
                results.append(grow_back(cluster, watcher, xid, args))
            stop_progress.set()
            check = loss_check(cluster, watcher, args.model)
            if alerts is not None:
                results = with_alerts(results, watcher, alerts)
                alerts.stop()
            if stack is not None:
                time.sleep(observe.SETTLE_S)  # a fault healed in 1-2 s: its plan scraped before asked for
                now = time.time()
                results = observe.with_metrics(results, stack.prometheus.url, now, say)
                say("the healer's own alerts that fired: "
                    f"{', '.join(observe.fired(stack.prometheus.url, stack.started, now)) or 'none'}")
            report(results, layout, observed=stack is not None, check=check)
            healed = bool(results) and all(r.healed for r in results)
            # the promise: resumed where it stopped, the same run as an uninterrupted one
            lost, fallback = PROMISE[args.model]
            healed = healed and check.matches and all(
                r.steps_lost <= lost and (fallback or not r.restore_warnings) for r in results)
            return 0 if healed else 1
    except (TrainmedicError, RuntimeError) as err:
        say(f"failed: {err}")
        return 1
    finally:
        stop_progress.set()
        if stack is not None:
            stack.stop()


def observed(args: argparse.Namespace, root: Path) -> tuple[observe.OpsStack | None, str | None]:
    """Prometheus, and an Alertmanager unless --alertmanager names one, started for --observe (their
    data in `root`, emptied first); the Alertmanager's URL. Without the packages: says how to get
    them, and the demo runs without."""
    missing = [name for name in observe.missing() if name == "prometheus" or not args.alertmanager]
    if missing:
        say(f"--observe: {' and '.join(missing)} not installed, running without; get them with "
            f"{ops_stack.HOW_TO_GET}")
        return None, args.alertmanager
    names = ("detector", "coordinator", "alerts", *node_names(args.nodes))
    stack = observe.OpsStack({name: free_port() for name in names})
    shutil.rmtree(root, ignore_errors=True)
    try:
        if not args.alertmanager:
            stack.alertmanager = observe.start_alertmanager(root)
        alertmanager = args.alertmanager or stack.alertmanager.url
        stack.start(root, alertmanager)
    except RuntimeError:
        stack.stop()
        raise
    say(f"Prometheus at {stack.prometheus.url} (every service scraped each second, the healer's alert "
        f"rules), Alertmanager at {alertmanager}")
    return stack, alertmanager


def node_names(count: int) -> tuple[str, ...]:
    return tuple(f"node-{i}" for i in range(count))


def grow_back(cluster: LocalCluster, watcher: Watcher, xid: FaultResult,
              args: argparse.Namespace) -> FaultResult:
    """Uncordon the node the Xid 79 took out, once its incident resolved; the job grows back."""
    node = cluster.nodes[1]
    settle(watcher)
    say(f"GROW: uncordoning {node} once incident {xid.incident_id} is resolved "
        f"(as `trainmedic nodes uncordon {node}`)")
    result = run_grow(cluster, watcher, node, xid.incident_id, len(cluster.nodes) * args.ranks_per_node,
                      args.fault_timeout_s)
    say(f"GROW: {'healed' if result.healed else 'NOT healed'}: world size {result.world_size_before} -> "
        f"{result.world_size_after} (first step after {result.time_to_resume_s}s, "
        f"{result.steps_lost} steps lost)")
    return result


@contextmanager
def running_job(args: argparse.Namespace, layout: DemoLayout, say: Callable[[str], None] = say,
                alertmanager: str | None = None,
                metrics_ports: dict[str, int] | None = None) -> Iterator[tuple[LocalCluster, Watcher]]:
    """The broker (unless TRAINMEDIC_KAFKA_BOOTSTRAP names one), the services and the demo job of
    `args.nodes` x `args.ranks_per_node` ranks, trained past step 10; all stopped on exit.

    With `alertmanager`, an alert bridge forwards the incidents there; with `metrics_ports`, the
    services named there serve their metrics. `layout.root` is emptied first (`deployment`).
    """
    with deployment(layout, "demo", DEMO_PREFIX, say) as settings:
        cluster = None
        try:
            nodes = node_names(args.nodes)
            cluster = LocalCluster(layout, settings.bootstrap, settings.topic_prefix, nodes, alertmanager,
                                   credentials_dir(), metrics_ports=metrics_ports or {},
                                   warm_preload=GPT_PRELOAD if args.model.startswith("gpt") else ())
            cluster.prepare(DETECTOR_CONFIG)
            cluster.start_services()
            say(f"starting detector, coordinator and {len(nodes)} nodes "
                f"(topics {settings.topic_prefix}*, logs in {layout.logs})")
            cluster.wait_ready()
            say("services ready")
            if os.geteuid() == 0:
                say(ROOT_RANKS)

            fsdp = args.model == "gpt-fsdp"
            train_args = (*(("--in-process",) if args.in_process else ()),
                          *(("--checkpoint-every", str(FSDP_CHECKPOINT_EVERY)) if fsdp else ()))
            with watched_job(cluster, settings, nodes, args, layout, say, train_args) as watcher:
                say(f"job {JOB} trains with world size {len(nodes) * args.ranks_per_node}")
                yield cluster, watcher
        finally:
            if cluster is not None:
                say("stopping the services and the job")
                cluster.close()


def with_alerts(results: list[FaultResult], watcher: Watcher, alerts: AlertWatch,
                wait_s: float = 20.0) -> list[FaultResult]:
    """The results with when each incident's alert appeared, and whether it cleared once the
    incident resolved (None when the incident had not resolved by the end)."""
    def resolved_ids() -> set[str]:
        with watcher.lock:
            return {i for i, seen in watcher.timeline.incidents.items() if seen.resolved_wall is not None}

    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline and not resolved_ids() <= set(alerts.gone):
        time.sleep(0.5)
    with watcher.lock:
        seen = dict(watcher.timeline.incidents)
    out = []
    for result in results:
        if result.incident_id is None:  # a node came back: no incident, no alert
            out.append(result)
            continue
        incident = seen.get(result.incident_id or "")
        first = alerts.first_seen.get(result.incident_id or "")
        alerted = None if incident is None or first is None else round(first - incident.opened_wall, 2)
        cleared = None if incident is None or incident.resolved_wall is None else (
            result.incident_id in alerts.gone)
        out.append(dataclasses.replace(result, alerted_after_s=alerted, alert_resolved=cleared))
        say(f"alert for {result.name}: appeared {alerted}s after the incident, "
            f"{'cleared' if cleared else 'still active' if cleared is False else 'incident still open'}")
    return out


def demo_job(nodes: tuple[str, ...], args: argparse.Namespace, layout: DemoLayout,
             train_args: tuple[str, ...] = (), program: tuple[str, ...] | None = None) -> JobSpec:
    """The demo's job on `nodes`; `train_args` go to its script after the demo's own. `program`: what
    python runs instead of the demo's module (a script, with its own arguments before the steps')."""
    n = len(nodes)
    ranks = args.ranks_per_node
    return JobSpec(
        id=JOB, nodes=nodes, ranks_per_node=ranks, master_port=rendezvous_base(),
        # Sizes in nodes -> FLOP/s: the job can shrink by a node and keep going.
        throughput={size: 1.0e14 * size * ranks for size in range(max(1, n - 2), n + 1)},
        # nice: on two cores the ranks must leave room for heartbeats and the broker.
        command=("nice", "-n", "10", sys.executable,
                 *(program or ("-m", "trainmedic.demo.train", "--model", args.model, "--report")),
                 "--steps", "1000000", "--step-s", str(args.step_s), "--timeout-s", "300", *train_args),
        checkpoint_dir=str(layout.root / "checkpoints"),
        transition_s=30,
    )


@contextmanager
def deployment(layout: DemoLayout, name: str, replacing: re.Pattern,
               say: Callable[[str], None] = say) -> Iterator[KafkaSettings]:
    """The operator's settings for a new deployment under the prefix `name`-<6 hex digits>. (which
    `replacing` matches: earlier ones' topics are deleted) on the broker `local_deployment` gives,
    stopped on exit if it is ours. `layout.root` is emptied first: snapshots or a ledger left by an
    earlier run would be restored from, or replayed, by this one."""
    shutil.rmtree(layout.root, ignore_errors=True)
    prefix = f"{name}-{uuid.uuid4().hex[:6]}."
    with local_deployment(prefix, say, replacing=replacing) as bootstrap:
        yield KafkaSettings.from_env(role="operator", bootstrap=bootstrap, topic_prefix=prefix)


@contextmanager
def watched_job(cluster: LocalCluster, settings: KafkaSettings, nodes: tuple[str, ...],
                args: argparse.Namespace, layout: DemoLayout, say: Callable[[str], None] = say,
                train_args: tuple[str, ...] = (),
                program: tuple[str, ...] | None = None) -> Iterator[Watcher]:
    """The demo's job on `nodes` (`demo_job`, running `program` when given) submitted, and a Watcher
    on it once it trained past step 10; the watcher stopped on exit."""
    from trainmedic.bus.producer import EventProducer

    watcher = Watcher(settings, JOB, say)
    watcher.start()
    try:
        with EventProducer(settings, client_id=settings.topics.owned("demo")) as producer:
            cluster.submit(producer, settings, demo_job(nodes, args, layout, train_args, program))
        say(f"submitted job {JOB}: {len(nodes)} nodes x {args.ranks_per_node} ranks (gloo on CPU)")
        if not watcher.wait_for(lambda t: t.current and t.current.last_step >= 10, 180):
            raise RuntimeError(f"the job did not reach step 10 (logs in {layout.logs})")
        yield watcher
    finally:
        watcher.stop()


def settle(watcher: Watcher, steps: int = 5) -> None:
    """Let the job take a few steps at its current generation before the next fault."""
    with watcher.lock:
        target = watcher.timeline.current.last_step + steps
        gen = watcher.timeline.generation
    watcher.wait_for(lambda t: t.generation == gen and t.current.last_step >= target, 60)


def progress(watcher: Watcher, cluster: LocalCluster, stop: threading.Event) -> None:
    """Every few seconds: the job's step, loss, generation and world size."""
    while not stop.wait(5.0):
        with watcher.lock:
            current, gen = watcher.timeline.current, watcher.timeline.generation
        if current is None:
            continue
        say(f"step {current.last_step} loss {latest_loss(cluster) or '?'} | generation {gen}, "
            f"world size {current.world_size}")


def loss_check(cluster: LocalCluster, watcher: Watcher, model: str) -> losses.LossCheck:
    """Every loss rank 0 of each generation of this submission logged against an uninterrupted run's."""
    logged = losses.logged(log.path for log in cluster.rank_logs(JOB, rank=0))
    with watcher.lock:
        stepped = set(watcher.timeline.generations)
    say(f"checking {len(logged)} logged losses against an uninterrupted run in one process")
    reference = list(losses.reference(model, max((s for _, s in logged), default=-1) + 1))
    check = losses.compare(logged, reference, stepped)
    say(check.describe())
    return check


FSDP_CHECKPOINT_EVERY = 5  # steps: gpt-fsdp keeps one copy of each shard, so a lost node's come from here
# What a fault may cost each model at most (the demo's promise): completed steps lost, and whether a
# restore may fall back from the replicas to the checkpoint. MLP and HSDP keep every state on two
# nodes. FSDP2 keeps one copy of each shard: a rank killed before it saved the step its peers saved
# costs that step, and a lost node's shards come from the last checkpoint, up to 5 steps back (run
# again, to the same losses).
PROMISE = {"mlp": (0, False), "gpt-hsdp": (0, False), "gpt-fsdp": (FSDP_CHECKPOINT_EVERY, True)}


def world_problem(args: argparse.Namespace) -> str | None:
    """Why the model cannot share its batch over the demo's world sizes (before and after the Xid
    79), or None."""
    from trainmedic.demo import gpt, mlp

    worlds = (args.nodes * args.ranks_per_node, (args.nodes - 1) * args.ranks_per_node)
    if args.model == "mlp":
        if worlds[0] > mlp.BATCH:
            return f"--model mlp shares a batch of {mlp.BATCH} rows: at most {mlp.BATCH} ranks"
    elif any(gpt.BATCH % w for w in worlds):
        return (f"--model {args.model} splits a batch of {gpt.BATCH} rows over the ranks; world sizes "
                f"{worlds[0]} and, after the Xid 79, {worlds[1]} must both divide it (the default 4 nodes "
                "x 2 ranks do)")
    return None


def latest_loss(cluster: LocalCluster) -> str | None:
    path = cluster.latest_rank_log(JOB)
    if path is None:
        return None
    with path.open("rb") as f:
        f.seek(max(0, path.stat().st_size - 2000))
        found = re.findall(rb"step \d+ loss ([0-9.]+)", f.read())
    return found[-1].decode() if found else None


def report(results: list[FaultResult], layout: DemoLayout, observed: bool = False,
           check: losses.LossCheck | None = None) -> None:
    """The table and report.json; `observed` (--observe) adds when Prometheus first counted each
    fault's incident and plan ("metrics s": incident/plan, from the injection); `check` (gpt-hsdp)
    how the logged losses compare with an uninterrupted run's."""
    path = layout.root / "report.json"
    path.write_text(json.dumps({"faults": [r.as_dict() for r in results],
                                **({"losses": check.as_dict()} if check else {})}, indent=2) + "\n")
    header = ("fault", "category", "sev", "action", "detect s", "kafka s", "resume s", "lost", "world",
              "healed", *(("metrics s",) if observed else ()))
    rows = [(r.name, r.category or "-", r.severity or "-", r.action or "-",
             _num(r.detection_delay_s), _num(r.published_after_fault_s), _num(r.time_to_resume_s),
             _num(r.steps_lost),
             f"{r.world_size_before}->{r.world_size_after or '?'}", "yes" if r.healed else "NO",
             *((f"{_num(r.metrics_incident_after_s)}/{_num(r.metrics_plan_after_s)}",) if observed else ()))
            for r in results]
    widths = [max(len(str(x)) for x in col) for col in zip(header, *rows, strict=True)]
    print()
    for row in (header, *rows):
        print("  ".join(str(x).ljust(w) for x, w in zip(row, widths, strict=True)))
    for r in results:
        for warning in r.restore_warnings:
            print(f"WARNING: {r.name}: RESTORE FELL BACK from the replica, steps lost: {warning}")
    for r in results:
        if r.phases:
            print(f"{r.name} by phase: {r.phases}")
    for r in results:
        if r.restored:
            print(f"{r.name}: {r.restored}")
    if check is not None:
        print(check.describe())
    print(f"\nreport: {path}")


def _num(value) -> str:
    return "-" if value is None else str(value)
