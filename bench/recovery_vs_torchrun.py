"""Recovery from five faults: trainmedic (ranks started cold, warm, and kept in-process) side by side
with torchrun --max-restarts, on the same job and machine, in one run.

Every side runs the same job (trainmedic.demo.train, gloo on CPU, the same world size and step
time) on this machine, one side after the other, each fault `--repeat` times:

  kill        kill -9 of one rank's process (node-1's last rank)
  raise       that rank's training step raises once (the rank-fault file's `crash`, armed 3 steps ahead)
  hang        rank 0 stops stepping, its process alive (the rank-fault file's `hang`, 3 steps ahead)
  node        a node lost, no spare: SIGKILL to the job's last node (its `trainmedic node` process
              group: executor, agents, warm launcher) and its ranks; the job goes on one node smaller
  node-spare  the same with a spare node in the cluster: the job goes on at its size on the spare

trainmedic is the demo's cluster (broker, detector, coordinator, one `trainmedic node` per node)
restoring from node-local snapshots taken every step, run three times: `cold` (every rank a new
interpreter, `trainmedic node --no-warm-start`), `warm` (ranks forked from a launcher that has
torch imported, the default) and `inproc` (warm, and the script trains under `rt.run`, its
`--in-process`: the ranks a peer's failure leaves waiting keep their processes, only the lost ones
start again). Its guards against repeated faults are off, so that each repeat times one recovery:
no restart backoff or limit, no SEV2 -> SEV1 escalation, one isolation per second. After a node
fault the node's service is started again, its `node_lost` resolves, it is uncordoned, and (no
spare) the job grows back before the next repeat. torchrun is
`torchrun --standalone --max-restarts N` (with TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1, without
which its restarts fail), restarting every worker from a checkpoint written every step; it
notices a hang only when the peers' collective times out (`--timeout-s`). A lost node has no
torchrun --standalone equivalent (its one agent is the node): those rows are n/a for it.

Per fault and side: the time from the injection to the first step any rank completes after the
restart, and the completed steps the restarted job ran again, from the job's timeline (telemetry
for trainmedic, the ranks' stdout lines for torchrun); the median and range over the repeats, the
most steps lost; for trainmedic, the median of each recovery phase (ops/incidents/phases.py).

    python bench/recovery_vs_torchrun.py [--repeat 5] [--faults kill,raise,hang,node,node-spare]
        [--sides torchrun,cold,warm,inproc] [--nodes 2] [--ranks-per-node 2] [--step-s 0.25] [--json OUT]

Uses TRAINMEDIC_KAFKA_BOOTSTRAP's broker when set, else starts and stops the local one.
Files and logs go to $TRAINMEDIC_HOME/bench-recovery/ (emptied at the start).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict
from pathlib import Path

import yaml
from harness.recovery_runs import (
    FAULTS,
    MODES,
    ON_TORCHRUN,
    SIDES,
    STARTED,
    USER_SCRIPT,
    Recovery,
    Results,
    say,
)
from harness.torchrun_side import torchrun_side

from trainmedic.bus.producer import EventProducer
from trainmedic.bus.settings import KafkaSettings, credentials_dir, home
from trainmedic.demo import losses
from trainmedic.demo.cluster import DemoLayout
from trainmedic.demo.faults import (
    DemoFault,
    FaultResult,
    hang_rank,
    kill_rank,
    lose_node,
    raise_in_rank,
    run_fault,
)
from trainmedic.demo.grow import run_grow
from trainmedic.demo.runner import DETECTOR_CONFIG, JOB, deployment, node_names, settle, watched_job
from trainmedic.demo.watch import Watcher
from trainmedic.local.cluster import LocalCluster
from trainmedic.ops.incidents.phases import PHASES
from trainmedic.schemas.nodes import NodeUncordoned

NODE_FAULTS = ("node", "node-spare")
# The coordinator's and detector's guards against a fault that keeps coming back (restart backoff and
# limit, the isolation cap's window, SEV2 -> SEV1 escalation, the storms after 5 incidents of a job or
# 10 of a node in 60 s) would time the guards, not the recovery.
COORDINATOR_GUARDS_OFF = {"restart_backoff_s": [0.0], "max_restarts": 1000, "isolation_window_s": 1.0}
DETECTOR_GUARDS_OFF = {**DETECTOR_CONFIG, "escalation": {"sev2_count": 1000},
                       "limits": {"job_incidents": 1000, "node_incidents": 1000}}
BENCH_PREFIX = re.compile(r"bench-[0-9a-f]{6}\.")  # what `deployment` prefixes this bench's clusters with


# trainmedic


def trainmedic_faults(args: argparse.Namespace) -> dict[str, DemoFault]:
    """The demo's injections for each fault, with what must follow."""
    last = 2 * args.ranks_per_node - 1  # node-1's last rank, which the demo's kill hits

    def same(world: int) -> int:
        return world

    def smaller(world: int) -> int:
        return world - args.ranks_per_node

    return {
        "kill": DemoFault("kill", "process_exit", "restart", kill_rank(JOB, node_names(2)[1]), same),
        "raise": DemoFault("raise", "software_error", "restart", raise_in_rank(last), same),
        "hang": DemoFault("hang", "hang", "restart", hang_rank(rank=0), same),
        "node": DemoFault("node", "node_lost", "reconfigure", lose_node(JOB), smaller),
        "node-spare": DemoFault("node-spare", "node_lost", "reconfigure", lose_node(JOB), same),
    }


@contextmanager
def bench_job(args: argparse.Namespace, layout: DemoLayout, mode: str,
              spares: int) -> Iterator[tuple[LocalCluster, Watcher]]:
    """The demo's services and job (as `runner.running_job`), with `spares` idle nodes besides the
    job's, ranks started as `mode` says (cold, warm, or warm and kept in-process), and the guards
    against repeated faults off."""
    with deployment(layout, "bench", BENCH_PREFIX, say) as settings:
        cluster = None
        try:
            nodes = node_names(args.nodes + spares)
            user = args.script == "user"
            node_args = (*(("--no-warm-start",) if mode == "cold" else ()),
                         *(("--allowed-script-dirs", str(USER_SCRIPT.parent)) if user else ()))
            cluster = LocalCluster(layout, settings.bootstrap, settings.topic_prefix, nodes,
                                   credentials=credentials_dir(), node_args=node_args)
            cluster.prepare(DETECTOR_GUARDS_OFF)
            _update_yaml(layout.root / "coordinator.yaml", COORDINATOR_GUARDS_OFF)
            cluster.start_services()
            cluster.wait_ready()
            train_args = ("--in-process",) if mode == "inproc" and not user else ()
            with watched_job(cluster, settings, nodes[:args.nodes], args, layout, say, train_args,
                             (str(USER_SCRIPT),) if user else None) as watcher:
                say(f"job {JOB} trains on {args.nodes} of {len(nodes)} nodes, ranks {mode}")
                yield cluster, watcher
        finally:
            if cluster is not None:
                cluster.close()


def _update_yaml(path: Path, values: dict) -> None:
    path.write_text(yaml.safe_dump({**yaml.safe_load(path.read_text()), **values}))


def trainmedic_mode(args: argparse.Namespace, root: Path, mode: str
                    ) -> tuple[Results, list[dict], list[losses.LossCheck]]:
    """Every selected fault `args.repeat` times on one mode's clusters (a second one with a spare
    node for node-spare); the recoveries per fault, the demo's full rows, and each cluster's losses
    against an uninterrupted run's."""
    results: Results = {}
    rows: list[dict] = []
    checks: list[losses.LossCheck] = []
    for spares, names in ((0, [f for f in args.faults if f != "node-spare"]),
                          (1, [f for f in args.faults if f == "node-spare"])):
        if not names:
            continue
        with bench_job(args, DemoLayout(root / f"{mode}-{spares}-spare"), mode, spares) as (cluster, watcher):
            for name in names:
                results[name] = [repeat(name, i, mode, cluster, watcher, args, rows)
                                 for i in range(args.repeat)]
            checks.append(loss_check(args, [log.path for log in cluster.rank_logs(JOB, rank=0)]))
    return results, rows, checks


def loss_check(args: argparse.Namespace, logs: list[Path]) -> losses.LossCheck:
    """Rank 0's logged losses, every generation's, against the script trained uninterrupted."""
    logged = losses.logged(logs)
    until = max((step for _, step in logged), default=-1) + 1
    if args.script == "user":
        from user_train import reference_losses  # bench/, on the path as the harness is; imports torch
        reference = list(reference_losses(until))
    else:
        reference = list(losses.reference(args.model, until))
    return losses.compare(logged, reference)


def repeat(name: str, i: int, mode: str, cluster: LocalCluster, watcher: Watcher, args: argparse.Namespace,
           rows: list[dict]) -> Recovery:
    """One repeat of fault `name` (its demo row appended to `rows`); a lost node is brought back after."""
    settle(watcher)
    say(f"trainmedic {mode}: {name} {i + 1}/{args.repeat}")
    recovery, row = trainmedic_fault(trainmedic_faults(args)[name], cluster, watcher, args.cap_s)
    say(f"trainmedic {mode}: {name}: {row.category} -> {row.action}, first step after "
        f"{recovery.time_to_step_s}s, {recovery.steps_lost} steps lost, world {row.world_size_before}->"
        f"{row.world_size_after}{'' if row.healed else ', NOT healed'}")
    rows.append({"mode": mode, **row.as_dict()})
    if name in NODE_FAULTS:
        bring_back(cluster, watcher, name == "node", args)
    return recovery


def trainmedic_fault(fault: DemoFault, cluster: LocalCluster, watcher: Watcher,
                     cap_s: float) -> tuple[Recovery, FaultResult]:
    """`run_fault`, and the phases of the recovery that started the generation stepping now."""
    row = run_fault(fault, cluster, watcher, cap_s)
    with watcher.lock:
        timeline = watcher.timeline
        found = next((found for view, found in timeline.recoveries.timed(JOB)
                      if any(plan.generation == timeline.generation for plan in view.plans)), ())
    phases = {p.name: round(p.seconds, 3) for p in found}
    if found:
        phases["total"] = round(sum(phases.values()), 3)
    return Recovery(row.time_to_resume_s, row.steps_lost, phases), row


def bring_back(cluster: LocalCluster, watcher: Watcher, grow: bool, args: argparse.Namespace) -> None:
    """The lost node's service started again; once its `node_lost` resolved it is uncordoned, and the
    job grows back onto it (`grow`) or it waits as the spare."""
    node = next(name for name in cluster.nodes if cluster.procs[name].poll() is not None)
    cluster._start(node, list(cluster.procs[node].args))  # the same command, appending to its log
    lost = watcher.wait_for(lambda t: next((s.incident.id for s in reversed(t.incidents.values())
                                           if s.incident.category == "node_lost" and s.incident.node == node),
                                          None), 30)
    if lost is None:
        raise RuntimeError(f"no node_lost incident for {node} (logs in {cluster.layout.logs})")
    if grow:
        result = run_grow(cluster, watcher, node, lost, args.nodes * args.ranks_per_node, args.cap_s)
        say(f"{node} back: the job grew to world size {result.world_size_after}")
        return
    watcher.wait_for(lambda t: t.incidents[lost].resolved_wall is not None, args.cap_s)
    uncordon(cluster, node)
    settle(watcher, steps=20)  # the coordinator reads the uncordon before the next fault
    say(f"{node} back as the spare")


def uncordon(cluster: LocalCluster, node: str) -> None:
    """As `trainmedic nodes uncordon NODE`: the node may take work again."""
    settings = KafkaSettings.from_env(role="operator", bootstrap=cluster.bootstrap,
                                      topic_prefix=cluster.prefix)
    with EventProducer(settings, client_id=settings.topics.owned("demo")) as producer:
        producer.send(settings.topics.nodes, cluster.layout.operator_key().sign(NodeUncordoned(
            ts=time.time(), node=node, reason="bench: back as the spare", by="bench",
            deployment=cluster.prefix)), key=node)


# the report


def summary(recoveries: list[Recovery], cap_s: float) -> str:
    """`median (min-max)` of the time to the first step, and how many repeats did not step again."""
    times = [r.time_to_step_s for r in recoveries if r.time_to_step_s is not None]
    failed = len(recoveries) - len(times)
    text = f"{statistics.median(times):.1f} ({min(times):.1f}-{max(times):.1f})" if times else "-"
    return text + (f", {failed}x > {cap_s:g}" if failed else "")


def most_lost(recoveries: list[Recovery]) -> str:
    lost = [r.steps_lost for r in recoveries if r.steps_lost is not None]
    return str(max(lost)) if lost else "-"


def columns(rows: list[list[str]]) -> list[str]:
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return ["  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in rows]


def recovery_table(args: argparse.Namespace, results: dict[str, Results]) -> list[str]:
    """Per fault: each side's time to the first step (median, min-max), and steps lost (most)."""
    sides = [s for s in SIDES if s in args.sides]
    heads = {"torchrun": "torchrun", "cold": "trainmedic cold", "warm": "trainmedic warm",
             "inproc": "trainmedic in-process"}
    rows = [["fault", *(f"{heads[s]} s" for s in sides), f"steps lost ({'/'.join(sides)})"]]
    for fault in args.faults:
        cells = [cell(side, fault, results[side].get(fault, []), args.cap_s) for side in sides]
        rows.append([FAULTS[fault], *(time for time, _ in cells), "/".join(lost for _, lost in cells)])
    return columns(rows)


def cell(side: str, fault: str, recoveries: list[Recovery], cap_s: float) -> tuple[str, str]:
    """One side's (time to the first step, steps lost) for a fault: n/a where the side has no such fault."""
    if side == "torchrun" and fault not in ON_TORCHRUN:
        return "n/a", "n/a"
    return (summary(recoveries, cap_s), most_lost(recoveries)) if recoveries else ("-", "-")


def phase_table(args: argparse.Namespace, results: dict[str, Results]) -> list[str]:
    """Per trainmedic fault and mode: the median seconds of each recovery phase over the repeats."""
    names = [name for name, _, _ in PHASES] + ["total"]
    rows = [["fault", "mode", *names]]
    for fault in args.faults:
        for mode in (s for s in MODES if s in args.sides):
            timed = [r.phases for r in results[mode].get(fault, ()) if r.phases]
            rows.append([FAULTS[fault], mode, *(
                f"{statistics.median(p.get(n, 0.0) for p in timed):.2f}" if timed else "-" for n in names)])
    return columns(rows)


def report(args: argparse.Namespace, world_size: int, results: dict[str, Results],
           checks: dict[str, list[losses.LossCheck]], load: dict[str, tuple[float, ...]],
           took_s: float) -> str:
    return "\n".join([
        f"world size {world_size} (trainmedic: {args.nodes} nodes x {args.ranks_per_node} ranks, node-spare "
        f"one node more; torchrun: --nproc-per-node {world_size}), step {args.step_s:g} s, gloo on CPU",
        "script: " + ("python bench/user_train.py (a user's DDP script, its loop under rt.run)"
                      if args.script == "user" else "python -m trainmedic.demo.train"),
        f"{args.repeat} repeats per fault and side: first step after the fault, s, median (min-max); "
        f"steps lost, most of any repeat",
        f"torchrun collective timeout (--timeout-s) {args.timeout_s:g} s; cap per fault {args.cap_s:g} s",
        *recovery_table(args, results),
        "",
        "trainmedic by phase, s (median over the repeats; a phase not in a recovery's log counts 0):",
        *phase_table(args, results),
        "",
        "rank 0's losses against an uninterrupted run's, per side (one check per cluster):",
        *(f"{side}: {check.describe()}" for side, found in checks.items() for check in found),
        "",
        "load average 1/5/15 min: " + "; ".join(
            f"{when} {' '.join(f'{x:.2f}' for x in avg)}" for when, avg in load.items()),
        f"cores: {os.cpu_count()}; this run took {took_s / 60:.1f} min",
    ])


def selection(text: str, allowed) -> list[str]:
    """A comma-separated subset of `allowed`, in `allowed`'s order."""
    asked = set(text.split(","))
    if not asked <= set(allowed):
        raise argparse.ArgumentTypeError(f"choose from {','.join(allowed)}")
    return [name for name in allowed if name in asked]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeat", type=int, default=5,
                        help="each fault this many times per side (default 5)")
    parser.add_argument("--faults", type=lambda t: selection(t, FAULTS), default=list(FAULTS),
                        help=f"comma-separated, of {','.join(FAULTS)} (default all)")
    parser.add_argument("--sides", type=lambda t: selection(t, SIDES),
                        help=f"comma-separated, of {','.join(SIDES)} (default all; with --script user, "
                        "all but warm)")
    parser.add_argument("--nodes", type=int, default=2, help="trainmedic's job's simulated nodes (default 2)")
    parser.add_argument("--ranks-per-node", type=int, default=2, help="ranks per node (default 2)")
    parser.add_argument("--step-s", type=float, default=0.25, help="one step, s (default 0.25, the demo's)")
    parser.add_argument("--timeout-s", type=float, default=60.0,
                        help="torchrun workers' collective timeout, which is what ends a hang (default 60)")
    parser.add_argument("--cap-s", type=float, default=120.0,
                        help="longest wait for the first step after a fault (default 120)")
    parser.add_argument("--script", choices=("module", "user"), default="module",
                        help="module: the demo's `python -m trainmedic.demo.train` (default); user: "
                        "bench/user_train.py started as `python user_train.py`, as a user writes it "
                        "(its loop always under rt.run: sides torchrun, cold and inproc)")
    parser.add_argument("--json", type=Path, help="also write every repeat's numbers here")
    parser.set_defaults(model="mlp")  # the demo job's model, which runner.demo_job reads
    args = parser.parse_args(argv)
    if args.nodes < 2 or args.ranks_per_node < 1 or args.repeat < 1:
        parser.error("needs at least 2 nodes, 1 rank per node and 1 repeat")
    if args.sides is None:
        args.sides = [side for side in SIDES if not (args.script == "user" and side == "warm")]
    if args.script == "user" and "warm" in args.sides:
        parser.error("--script user keeps its survivors in-process on every trainmedic side: choose "
                     "--sides from torchrun,cold,inproc (warm would be inproc again)")
    world_size = args.nodes * args.ranks_per_node
    root = home() / "bench-recovery"
    shutil.rmtree(root, ignore_errors=True)

    load = {"start": os.getloadavg()}
    results: dict[str, Results] = {side: {} for side in SIDES}
    rows: list = []
    checks: dict[str, list[losses.LossCheck]] = {}
    if "torchrun" in args.sides:
        results["torchrun"] = torchrun_side(args, root / "torchrun", world_size)
        checks["torchrun"] = [loss_check(args, [root / "torchrun" / "torchrun.log"])]
        load["after torchrun"] = os.getloadavg()
    for mode in MODES:
        if mode in args.sides:
            results[mode], mode_rows, checks[mode] = trainmedic_mode(args, root / "trainmedic", mode)
            rows += mode_rows
            load[f"after trainmedic {mode}"] = os.getloadavg()

    print()
    print(report(args, world_size, results, checks, load, time.monotonic() - STARTED))
    if args.json:
        args.json.write_text(json.dumps({
            "world_size": world_size, "nodes": args.nodes, "ranks_per_node": args.ranks_per_node,
            "step_s": args.step_s, "repeat": args.repeat, "torchrun_timeout_s": args.timeout_s,
            "cap_s": args.cap_s, "cores": os.cpu_count(), "load_average": load,
            "took_s": round(time.monotonic() - STARTED, 1),
            "results": {side: {f: [asdict(r) for r in runs] for f, runs in by_fault.items()}
                        for side, by_fault in results.items()},
            "trainmedic_faults": rows,
            "losses": {side: [check.as_dict() for check in found] for side, found in checks.items()},
        }, indent=2) + "\n")
    return 0 if all(check.matches for found in checks.values() for check in found) else 1  # a loss differs


if __name__ == "__main__":
    sys.exit(main())
