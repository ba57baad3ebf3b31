"""A planned node shutdown is not a fault (issue 17): real services, the real broker, real ranks.

The demo's services (detector, coordinator, three `trainmedic node` processes) run a two-rank gloo
job on ln0 and ln1; ln1's `trainmedic node` then gets SIGTERM, as systemd or a pod eviction sends
it. It must leave in order: announce `node_leaving`, send a last heartbeat marked `leaving`, wait
for the coordinator's re-plan to stop its ranks, exit 0. Expected: the job re-planned onto the
remaining nodes (ln0 and ln2) with one plan, no SEV1 (no `node_lost`), nothing isolated. Before
the change, the same SIGTERM stopped ln1 at once and its silence was a `node_lost` SEV1 that
isolated it.
"""

from __future__ import annotations

import signal
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.helpers.waiting import wait_until
from trainmedic.bus.admin import wait_for_topics
from trainmedic.bus.producer import EventProducer
from trainmedic.bus.reader import NOW, TopicReader
from trainmedic.bus.settings import KafkaSettings
from trainmedic.demo.cluster import DemoLayout
from trainmedic.local.cluster import LocalCluster, rendezvous_base
from trainmedic.schemas import (
    Incident,
    JobSpec,
    JobSubmitted,
    NodeJoined,
    NodeLeaving,
    RecoveryCompleted,
    RecoveryPlanned,
    RecoverySkipped,
)
from trainmedic.schemas.recovery import RecoveryKind

pytestmark = pytest.mark.kafka

NODES = ("ln0", "ln1", "ln2")
JOB = "moved"
LEAVE_TIMEOUT_S = 90.0  # longer than the re-plan takes here: the node leaves once its ranks are stopped
SETTLE_S = 8.0  # after ln1 exits: well past the 3 s heartbeat timeout that made it node_lost


@pytest.fixture
def cluster(kafka_bootstrap: str, deployment, tmp_path: Path) -> Iterator[LocalCluster]:
    prefix = f"leave{uuid.uuid4().hex[:8]}."
    settings = deployment(prefix, partitions=None)
    wait_for_topics(settings, list(settings.topics.all()))
    made = LocalCluster(DemoLayout(tmp_path / "demo"), kafka_bootstrap, prefix, NODES,
                        leave_timeout_s=LEAVE_TIMEOUT_S)
    made.prepare({})
    try:
        made.start_services()
        made.wait_ready(timeout_s=150)
        yield made
    finally:
        made.close()


def job_spec(layout: DemoLayout) -> JobSpec:
    return JobSpec(
        id=JOB, nodes=NODES[:2], ranks_per_node=1, master_port=rendezvous_base(),
        throughput={1: 1.0e14, 2: 2.0e14},
        command=("nice", "-n", "10", sys.executable, "-m", "trainmedic.demo.train", "--steps", "100000",
                 "--step-s", "0.2", "--report", "--timeout-s", "60"),
        checkpoint_dir=str(layout.root / "checkpoints"),
        transition_s=10,
    )


def log_events(settings: KafkaSettings, *more: str) -> list:
    with TopicReader(settings, [settings.topics.incidents, settings.topics.recovery, *more], end=NOW,
                     validate=True) as log:
        return [r.event for batch in log.batches() for r in batch]


def started(settings: KafkaSettings) -> bool:
    return any(isinstance(e, RecoveryCompleted) and e.job == JOB for e in log_events(settings))


def moved_off(settings: KafkaSettings, node: str) -> bool:
    """A plan that runs the job without `node` has completed."""
    events = log_events(settings)
    plans = {e.plan_id for e in events
             if isinstance(e, RecoveryPlanned) and e.job == JOB and e.nodes and node not in e.nodes}
    return any(isinstance(e, RecoveryCompleted) and e.plan_id in plans for e in events)


def test_a_node_stopped_with_sigterm_leaves_its_job_moved_and_is_not_isolated(cluster: LocalCluster) -> None:
    settings = KafkaSettings.from_env(role="admin", bootstrap=cluster.bootstrap, topic_prefix=cluster.prefix)
    where = f"(logs in {cluster.layout.logs})"
    with EventProducer(settings, client_id=settings.topics.owned("test")) as producer:
        submitted = JobSubmitted(ts=time.time(), job=job_spec(cluster.layout), deployment=cluster.prefix)
        submitted = cluster.layout.operator_key().sign(submitted)  # as `trainmedic job submit` signs it
        producer.send(settings.topics.jobs, submitted, key=JOB)
    wait_until(lambda: started(settings) and cluster.rank_pids("ln1", JOB), 120, f"job started {where}")
    time.sleep(3)  # a few steps and heartbeats first

    node = cluster.procs["ln1"]
    node.send_signal(signal.SIGTERM)
    began = time.monotonic()
    code = node.wait(LEAVE_TIMEOUT_S + 30)
    left_after = time.monotonic() - began
    log = cluster.log_text("ln1")
    assert code == 0, f"ln1 exited with {code}: {log[-2000:]}"
    assert left_after < LEAVE_TIMEOUT_S, f"ln1 waited its whole leave timeout: {log[-2000:]}"
    wait_until(lambda: moved_off(settings, "ln1"), 120, f"the job moved off ln1 {where}")
    time.sleep(SETTLE_S)  # anything the detector or coordinator would still (wrongly) decide
    for name in ("detector", "coordinator", "ln0", "ln2"):
        cluster.check_alive(name)

    events = log_events(settings)
    opened = [e for e in events if isinstance(e, Incident) and e.status == "open"]
    sev1 = [(i.category, i.node) for i in opened if i.severity == "SEV1"]
    assert sev1 == [], f"a planned leave raised SEV1s: {sev1} {where}"
    assert [i for i in opened if i.node == "ln1"] == [], where
    isolated = {n for e in events if isinstance(e, RecoveryPlanned | RecoverySkipped)
                for n in (e.isolated or {})}
    assert isolated == set(), where
    moves = [(p.kind, p.previous, p.nodes) for p in events
             if isinstance(p, RecoveryPlanned) and p.kind is not RecoveryKind.START]
    assert moves == [(RecoveryKind.RECONFIGURE, ("ln0", "ln1"), ("ln0", "ln2"))], where
    reports = [(e.type, e.node) for e in log_events(settings, settings.topics.acks)
               if isinstance(e, NodeJoined | NodeLeaving)]
    assert sorted(set(reports)) == [("node_joined", n) for n in NODES] + [("node_leaving", "ln1")], reports
    for step in ("announced that it leaves", "last heartbeat of ln1 sent", "no rank runs here any more",
                 "node ln1 left"):  # what an operator follows in the node's log
        assert step in log, f"{step!r} not in ln1's log: {log[-2000:]}"
    print(f"ln1 left {left_after:.1f} s after SIGTERM; job moved to ln0 ln2")
