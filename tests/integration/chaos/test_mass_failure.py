"""Every node of a 4-node cluster killed at once (a rack's power, a bad rollout): the healer must
not take the cluster apart. Real processes on the real broker: four `trainmedic node`s, the
detector and the coordinator (the demo's LocalCluster), the node processes killed with SIGKILL
together. Expected: first a telemetry gap (all silent at once looks like the telemetry, not
the nodes); once it lasts `gap.judge_after_s` (10 s here, 120 s by default) with the detector
reading everything, every node is judged lost; of those at most max(1, 10 %) (one) is isolated,
and one SEV1 `mass_failure` incident asks a person to look.
"""

from __future__ import annotations

import signal
import time
from pathlib import Path

import pytest

from tests.integration.test_coordinator import read
from trainmedic.bus.settings import KafkaSettings
from trainmedic.demo.cluster import DemoLayout
from trainmedic.local.cluster import LocalCluster
from trainmedic.schemas import Incident
from trainmedic.schemas.recovery import RecoveryPlanned, RecoverySkipped

pytestmark = pytest.mark.kafka

NODES = ("mf0", "mf1", "mf2", "mf3")
JUDGE_AFTER_S = 10.0


def test_every_node_killed_at_once_isolates_one_and_asks_a_person(kafka: KafkaSettings, tmp_path: Path):
    cluster = LocalCluster(DemoLayout(tmp_path / "demo"), kafka.bootstrap, kafka.topic_prefix, NODES)
    cluster.prepare({"gap": {"judge_after_s": JUDGE_AFTER_S}})
    try:
        cluster.start_services()
        cluster.wait_ready(timeout_s=150)
        time.sleep(5)  # a few heartbeats of every node first
        for node in NODES:
            cluster.procs[node].send_signal(signal.SIGKILL)
        for node in NODES:
            cluster.procs.pop(node).wait()

        deadline = time.monotonic() + 60
        seen: list = []
        while time.monotonic() < deadline:
            seen = read(kafka, "incidents") + read(kafka, "recovery")
            categories = {(e.category, e.node) for e in seen if isinstance(e, Incident)}
            if {("node_lost", n) for n in NODES} | {("mass_failure", None)} <= categories:
                break
            time.sleep(1)
        time.sleep(5)  # anything more it would (wrongly) do
        seen = read(kafka, "incidents") + read(kafka, "recovery")  # mass_failure is the coordinator's
        incidents = [e for e in seen if isinstance(e, Incident) and e.status == "open"]
        assert "telemetry_gap" in {e.category for e in incidents}
        assert {e.node for e in incidents if e.category == "node_lost"} == set(NODES), \
            f"detector log: {cluster.layout.logs / 'detector.log'}"
        isolated = {node for e in seen if isinstance(e, RecoveryPlanned | RecoverySkipped)
                    for node in (e.isolated or {})}
        assert len(isolated) <= 1, isolated
        mass = [e for e in incidents if e.category == "mass_failure"]
        assert [(m.severity, m.action) for m in mass] == [("SEV1", "alert")]
        for name in ("detector", "coordinator"):
            cluster.check_alive(name)
    finally:
        cluster.close()

