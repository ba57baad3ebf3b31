"""`trainmedic nodes` against a real broker and a real coordinator service: cordon, drain,
uncordon, list, and a refused unknown node."""

from __future__ import annotations

import time

import pytest

from tests.integration.test_coordinator import (
    CONFIG,
    SPEC,
    Keys,
    ack_all,
    env,
    keys,
    leading,
    read,
    step_until,
)
from trainmedic.bus.producer import EventProducer
from trainmedic.bus.settings import KafkaSettings
from trainmedic.cli import main
from trainmedic.recovery.coordinator.core import JobState
from trainmedic.schemas import Incident

pytestmark = pytest.mark.kafka
__all__ = ["env", "keys"]  # the fixtures, shared with test_coordinator


def nodes(capsys, *argv: str) -> tuple[int, str, str]:
    capsys.readouterr()
    code = main(["nodes", *argv])
    out = capsys.readouterr()
    return code, out.out, out.err


def test_cordon_drain_uncordon_and_list(env: KafkaSettings, keys: Keys, tmp_path, capsys) -> None:
    """The whole chain signed: the CLIs sign as the operator, the acks are signed by their nodes,
    and the coordinator folds only what verifies with the keys of the folder."""
    kafka = env
    spec = tmp_path / "job.yaml"
    spec.write_text(SPEC)
    (tmp_path / "train.py").write_text("")
    assert main(["job", "submit", str(spec), "--allow-unknown-nodes", "--wait", "0"]) == 0  # none runs yet
    code, _, err = nodes(capsys, "cordon", "n9")
    assert code == 2 and "unknown node 'n9'" in err and "known: n1 n2 n3" in err

    service = leading(kafka, sign=keys.coordinator.sign, trust=keys.trust)
    service.start()
    step_until(service, lambda: len(service.state.commands) == 3)
    ack_all(kafka, read(kafka, "commands"), keys)
    step_until(service, lambda: service.state.jobs["llm"].state is JobState.RUNNING)

    assert nodes(capsys, "cordon", "n2", "--reason", "bios update", "--by", "ops")[:2] == (
        0, "node n2: cordoned. job llm keeps running there; no new ranks go to it.\n")
    code, out, _ = nodes(capsys, "drain", "n3", "--reason", "replace NIC")
    assert code == 0 and out.startswith("node n3: draining. The coordinator re-plans job llm off it")
    step_until(service, lambda: service.state.jobs["llm"].generation == 1)
    moved = [c for c in read(kafka, "commands") if c.generation == 1]
    assert sorted((c.node, c.action) for c in moved) == [
        ("n1", "restart"), ("n2", "restart"), ("n3", "stop"), ("n4", "start")]
    ack_all(kafka, moved, keys)
    step_until(service, lambda: service.state.jobs["llm"].state is JobState.RUNNING)
    for _ in range(3):
        service.step(0.2)
    assert [c for c in read(kafka, "commands") if c.generation > 1] == []  # one plan for the drain

    code, out, _ = nodes(capsys, "list", "--config", str(_config(tmp_path)))
    table = [line.split(None, 1) for line in out.splitlines()]
    assert code == 0 and [row[0] for row in table] == ["NODE", "n1", "n2", "n3", "n4", "n5", "n6"]
    assert [line.split()[1] for line in out.splitlines()[1:]] == [
        "ready", "cordoned", "drained", "ready", "ready", "ready"]
    assert "bios update" in out.splitlines()[2] and out.splitlines()[2].rstrip().endswith("llm")
    assert "ago)" in out.splitlines()[3] and "replace NIC" in out.splitlines()[3]

    assert nodes(capsys, "uncordon", "n3")[:2] == (
        0, "node n3: back in the pool. The coordinator re-plans, and grows jobs onto it when the planner "
           "says the restart pays.\n")
    step_until(service, lambda: service.state.nodes["n3"].mode == "ready")
    step_until(service, lambda: service.state.capacity_decided_ts is not None
               and service.state.capacity_decided_ts >= service.state.capacity_ts)

    with EventProducer(kafka) as producer:  # the detector's SEV1 on n4: the coordinator isolates it
        producer.send(kafka.topics.incidents, Incident(
            ts=time.time(), id="inc-n4", status="open", category="gpu_lost", severity="SEV1",
            action="reconfigure", job="llm", node="n4", ranks=(4, 5), first_ts=time.time() - 1,
            evidence=("Xid 79",)), key="llm")
    step_until(service, lambda: not service.state.healthy("n4"))
    code, out, _ = nodes(capsys, "list")
    n4 = next(line for line in out.splitlines() if line.startswith("n4"))
    assert code == 0 and n4.split()[1] == "isolated"
    assert "incident inc-n4 (gpu_lost, open); back 300 s after its incident resolves" in n4
    assert nodes(capsys, "uncordon", "n4")[1].startswith(
        "node n4: back in the pool. It ends its isolation (incident inc-n4).")
    step_until(service, lambda: service.state.healthy("n4"))
    service.close()


def _config(tmp_path) -> object:
    path = tmp_path / "coordinator.yaml"
    path.write_text("nodes: [{id: n1}, {id: n2}, {id: n3}, {id: n4}, {id: n5}, {id: n6}]\n")
    return path


def test_help_explains_the_states() -> None:
    from trainmedic.cli import build_parser

    text = build_parser("nodes")._subparsers._group_actions[0].choices["nodes"].format_help()
    assert "drain NODE" in text and "isolated" in text and "uncordon NODE" in text


def test_an_isolated_node_is_readmitted_through_the_broker(env: KafkaSettings, tmp_path) -> None:
    kafka = env
    spec = tmp_path / "job.yaml"
    spec.write_text(SPEC)
    (tmp_path / "train.py").write_text("")
    assert main(["job", "submit", str(spec), "--allow-unknown-nodes", "--wait", "0"]) == 0  # none runs yet
    config = CONFIG.model_copy(update={"readmit_probation_s": 0.5, "group_window_s": 0.0})
    service = leading(kafka, config)
    service.start()
    step_until(service, lambda: len(service.state.commands) == 3)
    ack_all(kafka, read(kafka, "commands"))
    step_until(service, lambda: service.state.jobs["llm"].state is JobState.RUNNING)

    fault = Incident(ts=time.time(), id="inc-n2", status="open", category="gpu_lost", severity="SEV1",
                     action="reconfigure", job="llm", node="n2", ranks=(2, 3), first_ts=time.time() - 1,
                     evidence=("Xid 79",))
    with EventProducer(kafka) as producer:
        producer.send(kafka.topics.incidents, fault, key="llm")
    step_until(service, lambda: service.state.jobs["llm"].generation == 1)
    assert not service.state.healthy("n2")
    ack_all(kafka, [c for c in read(kafka, "commands") if c.generation == 1 and c.node != "n2"])
    step_until(service, lambda: service.state.jobs["llm"].state is JobState.RUNNING)
    with EventProducer(kafka) as producer:  # the job steps on n1 n3 n4: the detector resolves it
        resolved = Incident.model_validate({**fault.model_dump(), "status": "resolved", "ts": time.time()})
        producer.send(kafka.topics.incidents, resolved, key="llm")
    step_until(service, lambda: service.state.healthy("n2"))
    assert read(kafka, "nodes") == []  # operators' topic: the coordinator writes its own
    [back] = [e for e in read(kafka, "recovery") if e.type == "node_readmitted"]
    assert (back.type, back.node, back.incident_id, back.by) == (
        "node_readmitted", "n2", "inc-n2", "coordinator")
    assert back.reason.startswith("incident inc-n2 (gpu_lost) resolved; clean for ")
    step_until(service, lambda: service.state.capacity_decided_ts is not None)
    skipped = [e for e in read(kafka, "recovery") if e.type == "recovery_skipped" and e.job is None]
    assert len(skipped) == 1 and "(free: n2 n5)" in skipped[0].reason  # llm runs at its largest size
    service.close()

