"""Metrics endpoints of real service processes, scraped and parsed with prometheus_client's parser."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.helpers.ports import free_port
from tests.integration.ops.test_alerts import incident, produce
from trainmedic.bus.reader import partition_of
from trainmedic.bus.settings import KafkaSettings

pytestmark = pytest.mark.kafka


def scrape(port: int) -> dict[tuple[str, tuple], float]:
    """Sample (name, sorted labels) -> value from the endpoint."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
        text = response.read().decode()
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def scrape_until(port: int, proc: subprocess.Popen, done: Callable[[dict], bool], log: Path) -> dict:
    deadline = time.monotonic() + 60
    while True:
        assert proc.poll() is None, f"the service exited:\n{log.read_text()}"
        try:
            samples = scrape(port)
            if done(samples):
                return samples
        except OSError:
            pass
        assert time.monotonic() < deadline, f"metrics never got there:\n{log.read_text()[-3000:]}"
        time.sleep(0.3)


def start(kafka: KafkaSettings, tmp_path: Path, *args: str) -> tuple[subprocess.Popen, Path]:
    env = {**os.environ, "TRAINMEDIC_KAFKA_BOOTSTRAP": kafka.bootstrap,
           "TRAINMEDIC_TOPIC_PREFIX": kafka.topic_prefix, "TRAINMEDIC_HOME": str(tmp_path)}
    log = tmp_path / f"{args[0]}.log"
    with open(log, "w") as out:
        proc = subprocess.Popen([sys.executable, "-m", "trainmedic.cli", *args], env=env, stdout=out,
                                stderr=subprocess.STDOUT)
    return proc, log


def stop(proc: subprocess.Popen) -> None:
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def test_the_gpu_producer_serves_events_sent(kafka: KafkaSettings, tmp_path: Path) -> None:
    port = free_port()
    proc, log = start(kafka, tmp_path, "gpu", "--source", "synthetic", "--synthetic-nodes", "n1",
                      "--gpus-per-node", "2", "--interval-s", "0.1", "--metrics-port", str(port))
    try:
        sent = ("trainmedic_producer_events_sent_total", (("what", "gpu samples"),))
        samples = scrape_until(port, proc, lambda s: s.get(sent, 0) >= 4, log)
    finally:
        stop(proc)
    assert samples[sent] % 2 == 0  # two GPUs a round
    assert samples.get(("trainmedic_producer_events_dropped_total", (("what", "gpu samples"),)), 0) == 0


def test_the_alert_bridge_serves_deliveries_backlog_open_incidents_and_lag(
        kafka: KafkaSettings, tmp_path: Path, alertmanager: str) -> None:
    group_id = kafka.topics.owned("alerts-metrics")  # under the ops principal's groups
    produce(kafka, incident("sev1-m", "SEV1"))
    config = tmp_path / "alerts.yaml"
    config.write_text(f"group_id: {group_id}\nalertmanager: {{url: '{alertmanager}'}}\n")
    port = free_port()
    proc, log = start(kafka, tmp_path, "alerts", "--config", str(config), "--metrics-port", str(port))
    # the partition the incident went to (keyed by job): its lag drops to 0 once delivered and committed
    partition = str(partition_of("llm", 2))
    lag = ("trainmedic_consumer_lag", (("group", group_id), ("partition", partition),
                                       ("topic", kafka.topics.incidents)))
    delivered = ("trainmedic_alerts_delivered_total", (("sink", "alertmanager"),))
    try:
        samples = scrape_until(port, proc, lambda s: s.get(delivered) == 1 and s.get(lag) == 0, log)
    finally:
        stop(proc)
    assert samples[("trainmedic_alert_backlog", (("sink", "alertmanager"),))] == 0
    assert samples[("trainmedic_open_incidents", (("severity", "SEV1"),))] == 1
    assert samples.get(("trainmedic_alert_retries_total", (("sink", "alertmanager"),)), 0) == 0


def test_the_detector_serves_events_incidents_and_detection_delay(kafka: KafkaSettings,
                                                                  tmp_path: Path) -> None:
    from tests.integration.streams.test_detector_live import publish
    from tests.unit.streams.test_scenarios import load

    events = sorted(load("gpu_lost_xid79")[0], key=lambda e: e.ts)
    port = free_port()
    proc, log = start(kafka, tmp_path, "detector", "--app-id", f"{kafka.topic_prefix}detector",
                      "--start", "earliest", "--metrics-port", str(port),
                      "--max-skew-s", "1e10")  # a 2023 recording produced now: clocks are not tested here
    opened = ("trainmedic_incidents_total",
              (("category", "gpu_lost"), ("severity", "SEV1"), ("status", "open")))
    try:
        publish(kafka, events)
        samples = scrape_until(port, proc, lambda s: s.get(opened, 0) >= 1
                               and s.get(("trainmedic_detector_events_total", ()), 0) >= len(events), log)
    finally:
        stop(proc)
    assert samples[("trainmedic_detector_events_total", ())] == len(events)
    assert samples[("trainmedic_detection_delay_seconds_count", (("severity", "SEV1"),))] >= 1
    assert samples.get(("trainmedic_dead_letters_total", (("service", "detector"),)), 0) == 0


def test_the_coordinator_serves_plans_commands_and_jobs(kafka: KafkaSettings, tmp_path: Path) -> None:
    from trainmedic.bus.producer import EventProducer
    from trainmedic.schemas import JobSpec, JobSubmitted

    spec = JobSpec(id="llm", nodes=("n1", "n2"), throughput={1: 1e14, 2: 1.9e14}, command=("python", "t.py"))
    port = free_port()
    (tmp_path / "coordinator.yaml").write_text("nodes: [{id: n1}, {id: n2}]\n")  # the cluster
    proc, log = start(kafka, tmp_path, "coordinator", "--insecure", "--default-address", "127.0.0.1",
                      "--metrics-port", str(port), "--config", str(tmp_path / "coordinator.yaml"))
    started = ("trainmedic_commands_sent_total", (("action", "start"),))
    try:
        with EventProducer(kafka) as producer:
            producer.send(kafka.topics.jobs, JobSubmitted(ts=time.time(), job=spec), key=spec.id)
        samples = scrape_until(port, proc, lambda s: s.get(started, 0) >= 2, log)
    finally:
        stop(proc)
    assert samples[started] == 2  # one start per node, nothing re-sent yet
    assert samples[("trainmedic_recovery_plans_total", (("kind", "start"),))] == 1


def test_a_node_serves_its_agent_gpu_producer_and_executor_on_one_endpoint(kafka: KafkaSettings,
                                                                           tmp_path: Path) -> None:
    port = free_port()
    proc, log = start(kafka, tmp_path, "node", "--node", "n1", "--source", "synthetic",
                      "--gpus-per-node", "2", "--gpu-interval-s", "0.1", "--agent-interval-s", "0.1",
                      "--insecure", "--ranks-as-root", "--state-dir", str(tmp_path / "executor"),
                      "--metrics-port", str(port))
    gpu = ("trainmedic_producer_events_sent_total", (("what", "gpu samples"),))
    beats = ("trainmedic_producer_events_sent_total", (("what", "heartbeats"),))
    try:
        samples = scrape_until(port, proc, lambda s: s.get(gpu, 0) >= 4 and s.get(beats, 0) >= 2, log)
    finally:
        stop(proc)
    assert samples[gpu] >= 2 * samples[beats] - 2  # two GPUs sampled per heartbeat, give or take a round
