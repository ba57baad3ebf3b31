"""The demo's scripted faults: how each is injected (the mechanisms a user rehearses with), what
must follow, and what it cost (docs/demo.md, "The faults, and how each is injected").
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Literal

from trainmedic.demo.timeline import SeenIncident, Timeline
from trainmedic.demo.watch import Watcher
from trainmedic.local.cluster import LocalCluster
from trainmedic.runtime.faults import RankFault

RankFaultKind = Literal["hang", "crash"]  # the rank-fault file's kinds the demo arms ahead


@dataclass(frozen=True)
class FaultResult:
    """One row of the report (`$TRAINMEDIC_HOME/demo/report.json`). `detection_delay_s`: the incident's
    first evidence → its decision (`ts - first_ts`); `published_after_fault_s`: the injection → the
    incident on Kafka (its message time); `time_to_resume_s`: the injection → the job's first
    completed step after the repair."""

    name: str
    category: str | None
    severity: str | None
    action: str | None
    detection_delay_s: float | None
    time_to_resume_s: float | None
    steps_lost: int | None
    world_size_before: int
    world_size_after: int | None
    healed: bool
    expected_category: str
    incident_id: str | None = None
    alerted_after_s: float | None = None  # from the incident to its alert in Alertmanager
    alert_resolved: bool | None = None  # left Alertmanager's active alerts once the incident resolved
    restore_warnings: tuple[str, ...] = ()  # ranks of the new generation whose restore fell back
    restored: str | None = None  # where the new generation's ranks took their state from
    published_after_fault_s: float | None = None
    injected_wall: float | None = None  # when the fault was injected (wall clock)
    # `demo --observe`: from the injection to Prometheus' first sample counting its incident, its plan
    metrics_incident_after_s: float | None = None
    metrics_plan_after_s: float | None = None
    phases: str | None = None  # where the recovery's seconds went (ops/incidents/phases.py)

    def as_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class DemoFault:
    """A fault the demo injects into its local cluster, and the outcome that means the job healed."""

    name: str
    expected_category: str
    action: str  # restart, reconfigure or reattempt
    inject: Callable[[LocalCluster, Timeline], None]
    world_after: Callable[[int], int]


def kill_rank(job: str, node: str, rank_index: int = -1) -> Callable[[LocalCluster, Timeline], None]:
    """kill -9 one of the job's ranks on `node` (its last local rank by default)."""
    def inject(cluster: LocalCluster, timeline: Timeline) -> None:
        pids = cluster.rank_pids(node, job)
        if not pids:
            raise RuntimeError(f"no live rank of {job} on {node} to kill")
        rank = sorted(pids)[rank_index]
        os.kill(pids[rank], signal.SIGKILL)
    return inject


def gpu_fault(node: str, spec: str) -> Callable[[LocalCluster, Timeline], None]:
    """Append a synthetic GPU fault to `node`'s GPU producer control file."""
    def inject(cluster: LocalCluster, timeline: Timeline) -> None:
        with cluster.layout.gpu_control(node).open("a") as control:
            control.write(f"{spec},node={node}\n")
    return inject


def link_flap(node: str, link: str, for_s: float) -> Callable[[LocalCluster, Timeline], None]:
    def inject(cluster: LocalCluster, timeline: Timeline) -> None:
        with cluster.layout.agent_control(node).open("a") as control:
            control.write(f"flap={link},for={for_s:g}s\n")
    return inject


def hang_rank(rank: int, steps_ahead: int = 3) -> Callable[[LocalCluster, Timeline], None]:
    """Arm the demo's rank-fault file: `rank` stops stepping (process alive) a few steps from now."""
    def inject(cluster: LocalCluster, timeline: Timeline) -> None:
        arm_rank_fault(cluster.layout.rank_faults, timeline, "hang", rank, steps_ahead)
    return inject


def raise_in_rank(rank: int, steps_ahead: int = 3) -> Callable[[LocalCluster, Timeline], None]:
    """Arm the demo's rank-fault file: `rank`'s training step raises a few steps from now, once."""
    def inject(cluster: LocalCluster, timeline: Timeline) -> None:
        arm_rank_fault(cluster.layout.rank_faults, timeline, "crash", rank, steps_ahead)
    return inject


def arm_rank_fault(fault_file: Path, timeline: Timeline, fault: RankFaultKind, rank: int,
                   steps_ahead: int = 3) -> None:
    """Write a fault file that makes `rank` hang (`hang`) or raise (`crash`) `steps_ahead` steps past
    the timeline's last step, in its current generation only (the restarted job does not fault again)."""
    armed = RankFault(fault=fault, rank=rank, at_step=timeline.current.last_step + steps_ahead,
                      generation=timeline.generation)
    fault_file.write_text(json.dumps([armed.model_dump()]))


def lose_node(job: str) -> Callable[[LocalCluster, Timeline], None]:
    """A node lost: SIGKILL to the `trainmedic node` process of the job's last node (its process
    group: executor, agents, warm launcher) and to the job's ranks there, all at once."""
    def inject(cluster: LocalCluster, timeline: Timeline) -> None:
        node = job_nodes(timeline)[-1]
        pids = list(cluster.rank_pids(node, job).values())
        with contextlib.suppress(ProcessLookupError):
            os.killpg(cluster.procs[node].pid, signal.SIGKILL)
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
    return inject


def job_nodes(timeline: Timeline) -> tuple[str, ...]:
    """The nodes the job runs on: those of its latest recovery plan (the first one started it)."""
    if not timeline.planned:
        raise RuntimeError(f"no plan of job {timeline.job} seen: its nodes are not known")
    return timeline.planned[-1][1].nodes


def run_fault(fault: DemoFault, cluster: LocalCluster, watcher: Watcher, timeout_s: float) -> FaultResult:
    """Inject `fault`, wait until the job steps again as expected, and measure."""
    with watcher.lock:
        before_gen = watcher.timeline.generation
        world_before = watcher.timeline.current.world_size
        fault.inject(cluster, watcher.timeline)
    injected = time.time()

    def incident(t: Timeline):
        return next((s for s in t.incidents_since(injected) if s.incident.severity != "WARN"), None)

    def resumed(t: Timeline):
        seen = incident(t)
        if seen is None:
            return None
        if fault.action == "reattempt":
            first = t.resumed_in_place(seen.incident.id, before_gen)
            return None if first is None else (before_gen, first)
        newer = [g for g in t.generations if g > before_gen]
        return (max(newer), t.generations[max(newer)].first_step_ts) if newer else None

    outcome = watcher.wait_for(resumed, timeout_s)
    if outcome is not None and outcome[0] != before_gen:
        all_restored(watcher, outcome[0])
    with watcher.lock:
        timeline = watcher.timeline
        seen = incident(timeline)
        if outcome is None:
            return FaultResult(
                fault.name, seen and seen.incident.category, seen and str(seen.incident.severity),
                seen and str(seen.incident.action), _delay(seen), None, None, world_before, None, False,
                fault.expected_category, seen and seen.incident.id,
                published_after_fault_s=published_after(seen, injected), injected_wall=injected)
        gen, resumed_ts = outcome
        after = timeline.generations[gen]
        # After a reattempt the same processes carry on: a re-run step is not a lost one.
        lost = 0 if fault.action == "reattempt" else timeline.steps_lost(before_gen, gen)
        healed = (after.world_size == fault.world_after(world_before)
                  and seen.incident.category == fault.expected_category)
        return FaultResult(
            fault.name, seen.incident.category, str(seen.incident.severity), str(seen.incident.action),
            _delay(seen), round(resumed_ts - injected, 2), lost, world_before, after.world_size, healed,
            fault.expected_category, seen.incident.id,
            restore_warnings=() if gen == before_gen else tuple(timeline.restore_warnings.get(gen, ())),
            restored=None if gen == before_gen else timeline.restore_of(gen),
            phases=timeline.phases_of(seen.incident.id),
            published_after_fault_s=published_after(seen, injected), injected_wall=injected,
        )


def all_restored(watcher: Watcher, generation: int, wait_s: float = 30.0) -> None:
    """Wait (a little) until every rank of `generation` said where its state came from: the first
    rank to step is not the last to report."""
    watcher.wait_for(lambda t: len({s.rank for s in t.restored.get(generation, ())})
                     >= t.generations[generation].world_size, wait_s)


def _delay(seen: SeenIncident | None) -> float | None:
    """The incident's first evidence → its decision."""
    return None if seen is None or seen.detection_delay_s is None else round(seen.detection_delay_s, 3)


def published_after(seen: SeenIncident | None, injected: float) -> float | None:
    """The injection → the incident on Kafka: when anyone reading the log could know (None where
    the incident or its message time is not known)."""
    if seen is None or seen.published is None:
        return None
    return round(seen.published - injected, 2)
