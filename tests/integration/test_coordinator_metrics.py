"""What the healer's own alerts read from a coordinator (compose/prometheus/rules.yml), through a
real broker: `trainmedic_coordinator_leading` says 1 only once the coordinator acts on a rebuilt
state, and by then `trainmedic_isolations_left` holds that state's count, not its initial 0 (which
TrainmedicIsolationCapReached would take for a reached cap); an invalid record it dead-letters is
counted (TrainmedicDeadLetters)."""

from __future__ import annotations

import threading
import time

import pytest
from prometheus_client import REGISTRY

from tests.integration.test_coordinator import CONFIG, ROOT, leading, sign, step_until
from trainmedic.bus.producer import EventProducer
from trainmedic.bus.settings import KafkaSettings
from trainmedic.recovery.coordinator import metrics
from trainmedic.recovery.coordinator.kafka_adapter import CoordinatorService, lead

pytestmark = pytest.mark.kafka


def gauge(name: str, **labels: str) -> float | None:
    return REGISTRY.get_sample_value(name, labels)


def test_a_started_coordinator_reports_its_isolations_left_at_once(kafka: KafkaSettings) -> None:
    metrics.ISOLATIONS_LEFT.set(0)  # as a process starts: no state yet
    service = leading(kafka)
    try:
        service.start()  # no tick yet: the first is tick_s away
        assert gauge("trainmedic_isolations_left") == 1  # five nodes: the cap's floor of one
    finally:
        service.close()


def test_a_coordinator_reports_leading_only_once_its_state_is_rebuilt(
        kafka: KafkaSettings, monkeypatch: pytest.MonkeyPatch) -> None:
    rebuilding, rebuilt = threading.Event(), threading.Event()
    start = CoordinatorService.start

    def slow_start(self: CoordinatorService) -> None:
        rebuilding.set()
        rebuilt.wait(60)
        start(self)

    monkeypatch.setattr(CoordinatorService, "start", slow_start)
    stop = threading.Event()
    thread = threading.Thread(target=lead, args=(kafka, CONFIG),
                              kwargs={"sign": sign, "trust": None, "rendezvous_root": ROOT, "stop": stop})
    thread.start()
    try:
        assert rebuilding.wait(60), "the coordinator never took the lease"
        assert gauge("trainmedic_coordinator_leading") == 0  # it holds the lease but acts on nothing yet
        rebuilt.set()
        deadline = time.monotonic() + 30
        while gauge("trainmedic_coordinator_leading") != 1:
            assert time.monotonic() < deadline, "the coordinator never reported leading"
            time.sleep(0.1)
    finally:
        stop.set()
        rebuilt.set()
        thread.join(60)
    assert not thread.is_alive()
    assert gauge("trainmedic_coordinator_leading") == 0


def test_an_invalid_record_the_coordinator_dead_letters_is_counted(kafka: KafkaSettings) -> None:
    def counted() -> float:
        return gauge("trainmedic_dead_letters_total", service="coordinator") or 0.0

    service = leading(kafka)
    try:
        service.start()
        before = counted()
        with EventProducer(kafka) as producer:
            producer.send(kafka.topics.jobs, b"not a job", key="j")
        step_until(service, lambda: counted() == before + 1)
    finally:
        service.close()
