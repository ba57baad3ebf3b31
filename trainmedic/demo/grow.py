"""The demo's last act: the node the Xid 79 took out is uncordoned once its incident resolved, and
the job grows back onto it, measured like a fault (docs/demo.md, "The faults, and how each is injected").
"""

from __future__ import annotations

import time

from trainmedic.bus.producer import EventProducer
from trainmedic.bus.settings import KafkaSettings
from trainmedic.demo.faults import FaultResult, all_restored
from trainmedic.demo.watch import Watcher
from trainmedic.local.cluster import LocalCluster
from trainmedic.schemas.nodes import NodeUncordoned


def run_grow(cluster: LocalCluster, watcher: Watcher, node: str, xid_incident: str | None, full_world: int,
             timeout_s: float) -> FaultResult:
    """Uncordon `node` once `xid_incident` resolved (waiting up to `timeout_s`), then wait for the
    job to step at a larger world size."""
    watcher.wait_for(lambda t: xid_incident is None or (
        (seen := t.incidents.get(xid_incident)) is not None and seen.resolved_wall is not None), timeout_s)
    with watcher.lock:
        before_gen = watcher.timeline.generation
        world_before = watcher.timeline.current.world_size
    settings = KafkaSettings.from_env(role="operator", bootstrap=cluster.bootstrap,
                                      topic_prefix=cluster.prefix)
    injected = time.time()
    with EventProducer(settings, client_id=settings.topics.owned("demo")) as producer:
        producer.send(settings.topics.nodes, cluster.layout.operator_key().sign(NodeUncordoned(
            ts=injected, node=node, reason="demo: the Xid 79 incident is resolved", by="demo",
            deployment=settings.topics.prefix)), key=node)

    def grown(t) -> int | None:
        larger = [g for g, gen in t.generations.items() if g > before_gen and gen.world_size > world_before]
        return max(larger) if larger else None

    gen = watcher.wait_for(grown, timeout_s)
    if gen is not None:
        all_restored(watcher, gen)
    with watcher.lock:
        timeline = watcher.timeline
        plan = next((p for wall, p in timeline.planned
                     if wall >= injected and p.incident_id is None and node in p.nodes), None)
        if gen is None:
            return FaultResult("grow", None, None, plan and str(plan.kind), None, None, None, world_before,
                               None, False, "-", injected_wall=injected)
        after = timeline.generations[gen]
        return FaultResult(
            "grow", None, None, plan and str(plan.kind), None, round(after.first_step_ts - injected, 2),
            timeline.steps_lost(before_gen, gen), world_before, after.world_size,
            after.world_size == full_world, "-",
            restore_warnings=tuple(timeline.restore_warnings.get(gen, ())), restored=timeline.restore_of(gen),
            injected_wall=injected,
        )
