"""Upgrading through a real broker: a log an older coordinator wrote (its decisions on incidents, its
re-admissions on nodes) is copied to the recovery topic once by `trainmedic coordinator
--migrate-lifecycle`, and the coordinator then rebuilds the state that log holds, issuing nothing."""

from __future__ import annotations

import pytest

from tests.integration.test_coordinator import leading, read
from tests.unit.coordinator.world import CONFIG, Recorder, incident
from trainmedic.bus.producer import EventProducer
from trainmedic.bus.settings import KafkaSettings
from trainmedic.cli import main
from trainmedic.schemas import IncidentStatus

pytestmark = pytest.mark.kafka

LIVE = CONFIG.model_copy(update={"tick_s": 0.2})


def old_layout(suffix: str, kind: str) -> str:
    """Where a coordinator older than the recovery topic wrote an event."""
    if suffix != "recovery":
        return suffix
    return "nodes" if kind == "node_readmitted" else "incidents"


def recorded() -> Recorder:
    """A job started; a SEV1 on n2 moved it to generation 1; the fault resolved; n2 re-admitted."""
    rec = Recorder(LIVE)
    rec.started(now=1.0)
    rec.ack(rec.feed(incident("xid-2", "SEV1", node="n2", ts=60.0, category="gpu_lost"), now=60.0), "done",
            now=61.0)
    resolved = rec.state.incidents["xid-2"].model_copy(update={"status": IncidentStatus.RESOLVED, "ts": 70.0})
    rec.feed(resolved, now=70.0)
    rec.tick(now=1000.0)
    return rec


@pytest.fixture
def env(kafka: KafkaSettings, monkeypatch: pytest.MonkeyPatch) -> KafkaSettings:
    monkeypatch.setenv("TRAINMEDIC_KAFKA_BOOTSTRAP", kafka.bootstrap)
    monkeypatch.setenv("TRAINMEDIC_TOPIC_PREFIX", kafka.topic_prefix)
    return kafka


def test_an_older_coordinators_log_is_migrated_once_and_rebuilds_the_same_state(env: KafkaSettings,
                                                                                capsys) -> None:
    kafka, rec = env, recorded()
    with EventProducer(kafka) as producer:
        for (suffix, key), event in rec.placed():
            producer.send(kafka.topics.name(old_layout(suffix, event.type)), event, key=key)
    moved = [(key, e) for (suffix, key), e in rec.placed() if suffix == "recovery" and e.type != "incident"]
    assert {e.type for _, e in moved} == {"recovery_planned", "recovery_completed", "node_readmitted"}

    assert main(["coordinator", "--migrate-lifecycle"]) == 0
    out = capsys.readouterr().out
    assert f"copied {len(moved)} records of an older coordinator to {kafka.topics.recovery}" in out
    assert f"     1  node_readmitted from {kafka.topics.nodes}" in out
    assert sorted(map(repr, read(kafka, "recovery"))) == sorted(repr(e) for _, e in moved)

    assert main(["coordinator", "--migrate-lifecycle"]) == 1  # once: a second run copies nothing
    assert "already holds" in capsys.readouterr().err
    assert len(read(kafka, "recovery")) == len(moved)

    commands = read(kafka, "commands")
    coordinator = leading(kafka, LIVE)
    coordinator.start()
    for _ in range(10):
        coordinator.step(0.2)
    job = coordinator.state.jobs["llm"]
    assert (job.state.value, job.generation, job.nodes) == ("running", 1, rec.state.jobs["llm"].nodes)
    assert coordinator.state.healthy("n2") and coordinator.state.plans == rec.state.plans
    # it knows what it did: nothing is issued again (the same records; partitions interleave in any order)
    assert sorted(map(repr, read(kafka, "commands"))) == sorted(map(repr, commands))
    coordinator.close()
