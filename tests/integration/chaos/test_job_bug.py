"""A bug in the training script is the job's, not a node's: real services, the real broker, real ranks.

The demo's services (detector, coordinator, two `trainmedic node` processes with their
executors) run a two-rank gloo job whose rank 0 raises the same exception at step 3 of every
generation (the demo job's `crash` fault, armed for any generation). Each failure must be the
job's SEV2 `software_error`: no node SEV1, no isolation, no re-plan away from a node; restarts
back off (`restart_backoff_s` 8 s, 16 s here: short, yet longer than a failing generation
lasts) and after `max_restarts` (3) the coordinator gives up with `recovery_failed` and a SEV1
`recovery_failed` alert for a person.
"""

from __future__ import annotations

import json
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from trainmedic.bus.admin import wait_for_topics
from trainmedic.bus.producer import EventProducer
from trainmedic.bus.reader import NOW, TopicReader
from trainmedic.bus.settings import KafkaSettings
from trainmedic.demo.cluster import DemoLayout
from trainmedic.local.cluster import LocalCluster, rendezvous_base
from trainmedic.schemas import (
    Incident,
    JobEnded,
    JobSpec,
    JobSubmitted,
    RecoveryFailed,
    RecoveryPlanned,
    RecoverySkipped,
)
from trainmedic.schemas.recovery import RecoveryKind

pytestmark = pytest.mark.kafka

NODES = ("bn0", "bn1")
JOB = "buggy"
BACKOFF_S = (8.0, 16.0)  # longer than a failing generation lasts here (4-5 s): the waits show
MAX_RESTARTS = 3
GIVE_UP_WITHIN_S = 200.0  # services up, then four generations that each fail within seconds


@pytest.fixture
def cluster(kafka_bootstrap: str, deployment, tmp_path: Path,
            monkeypatch: pytest.MonkeyPatch) -> Iterator[LocalCluster]:
    monkeypatch.setenv("TRAINMEDIC_COORDINATOR_RESTART_BACKOFF_S", ";".join(f"{s:g}" for s in BACKOFF_S))
    monkeypatch.setenv("TRAINMEDIC_COORDINATOR_MAX_RESTARTS", str(MAX_RESTARTS))
    prefix = f"bug{uuid.uuid4().hex[:8]}."
    settings = deployment(prefix, partitions=None)
    wait_for_topics(settings, list(settings.topics.all()))
    made = LocalCluster(DemoLayout(tmp_path / "demo"), kafka_bootstrap, prefix, NODES)
    made.prepare({})
    made.layout.rank_faults.write_text(json.dumps({"fault": "crash", "rank": 0, "at_step": 3}))
    try:
        made.start_services()
        made.wait_ready(timeout_s=150)
        yield made
    finally:
        made.close()


def job_spec(layout: DemoLayout) -> JobSpec:
    return JobSpec(
        id=JOB, nodes=NODES, ranks_per_node=1, master_port=rendezvous_base(),
        throughput={1: 1.0e14, 2: 2.0e14},  # it could shrink to one node: isolating one would "work"
        command=("nice", "-n", "10", sys.executable, "-m", "trainmedic.demo.train", "--steps", "1000",
                 "--step-s", "0.2", "--report", "--timeout-s", "60"),
        checkpoint_dir=str(layout.root / "checkpoints"),
        transition_s=10,
    )


def log_events(settings: KafkaSettings) -> list:
    with TopicReader(settings, [settings.topics.incidents, settings.topics.recovery], end=NOW,
                     validate=True) as log:
        return [r.event for batch in log.batches() for r in batch]


def test_the_same_error_every_generation_backs_off_and_gives_up_without_blaming_a_node(
        cluster: LocalCluster) -> None:
    settings = KafkaSettings.from_env(role="admin", bootstrap=cluster.bootstrap, topic_prefix=cluster.prefix)
    with EventProducer(settings, client_id=settings.topics.owned("test")) as producer:
        submitted = JobSubmitted(ts=time.time(), job=job_spec(cluster.layout), deployment=cluster.prefix)
        submitted = cluster.layout.operator_key().sign(submitted)  # as `trainmedic job submit` signs it
        producer.send(settings.topics.jobs, submitted, key=JOB)
    deadline = time.monotonic() + GIVE_UP_WITHIN_S
    events: list = []
    while time.monotonic() < deadline and not any(isinstance(e, RecoveryFailed) for e in events):
        time.sleep(2)
        for name in ("detector", "coordinator", *NODES):
            cluster.check_alive(name)
        events = log_events(settings)
    time.sleep(3)  # anything the detector or coordinator would still (wrongly) decide
    events = log_events(settings)
    where = f"(logs in {cluster.layout.logs})"

    opened = [e for e in events if isinstance(e, Incident) and e.status == "open"]
    node_sev1 = [(i.category, i.node) for i in opened if i.severity == "SEV1" and i.node is not None]
    assert node_sev1 == [], f"a node was blamed for the job's bug: {node_sev1} {where}"
    failures = [i for i in opened if i.category == "software_error"]
    assert [(i.severity, i.job) for i in failures] == [("SEV2", JOB)] * (MAX_RESTARTS + 1), where
    assert all("follows job" in " ".join(i.evidence) for i in failures[1:]), failures[1].evidence

    plans = [e for e in events if isinstance(e, RecoveryPlanned)
             and e.kind not in (RecoveryKind.START, RecoveryKind.STOP)]  # the give-up stops its ranks
    restart_in_place = (RecoveryKind.RESTART, NODES, {})
    assert [(p.kind, p.nodes, p.isolated or {}) for p in plans] == [restart_in_place] * MAX_RESTARTS
    gaps = [later.ts - earlier.ts for earlier, later in zip(plans, plans[1:], strict=False)]
    assert all(gap >= wait for gap, wait in zip(gaps, BACKOFF_S, strict=True)), (gaps, BACKOFF_S)
    skipped_isolated = [e for e in events if isinstance(e, RecoverySkipped) and e.isolated]
    assert skipped_isolated == [], where

    (failed,) = [e for e in events if isinstance(e, RecoveryFailed)]
    assert failed.job == JOB and f"{MAX_RESTARTS} restarts of {JOB}" in failed.reason
    alerts = [i for i in opened if i.category == "recovery_failed"]
    assert [(a.severity, a.action, a.job, a.node) for a in alerts] == [("SEV1", "alert", JOB, None)]
    (ended,) = [e for e in events if isinstance(e, JobEnded)]
    assert (ended.job, ended.state, ended.reason) == (JOB, "failed", failed.reason)
    print(f"restart plans after {[round(p.ts - failures[0].ts, 1) for p in plans]} s, gaps "
          f"{[round(g, 1) for g in gaps]} s; recovery_failed {failed.ts - failures[0].ts:.1f} s "
          f"after the first failure")
