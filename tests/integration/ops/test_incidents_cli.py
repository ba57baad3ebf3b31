"""`trainmedic incidents` as a real process over a recorded incident log on a real broker: the
detector's incidents and the coordinator's recovery events, two topics told as one story."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from datetime import UTC, datetime

import pytest
from confluent_kafka import Producer

from bus.settings import KafkaSettings
from schemas import RecoveryCompleted, encode
from tests.unit.ops.incident_log import placed

pytestmark = pytest.mark.kafka


def incidents(kafka: KafkaSettings, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "TRAINMEDIC_KAFKA_BOOTSTRAP": kafka.bootstrap,
           "TRAINMEDIC_TOPIC_PREFIX": kafka.topic_prefix}
    return subprocess.run([sys.executable, "-m", "trainmedic.cli", "incidents", *args], capture_output=True,
                          text=True, env=env, timeout=120)


HOUR_AGO = time.time() - 3600


@pytest.fixture
def log(kafka: KafkaSettings) -> list:
    """The recorded log, on the topics and with the keys the detector and coordinator give it, stamped
    an hour ago by the broker's clock; then one more incident stamped now (what --since must tell
    apart). Not part of the log: a `recovery_completed` for the failed restart of hang-2, forged on
    the detector's topic."""
    producer = Producer(kafka.client_config())
    events = []
    for (topic, key), event in placed():
        producer.produce(kafka.topics.name(topic), encode(event), key, timestamp=int(HOUR_AGO * 1000))
        events.append(event)
    failed = next(e for e in events if e.type == "recovery_failed")
    forged = RecoveryCompleted(ts=failed.ts - 0.5, plan_id=failed.plan_id, job=failed.job,
                               generation=failed.generation)
    producer.produce(kafka.topics.incidents, encode(forged), forged.job, timestamp=int(HOUR_AGO * 1000))
    first = next(e for e in events if e.type == "incident")
    late = first.model_copy(update={"id": "late-9", "ts": time.time(), "first_ts": time.time() - 1})
    producer.produce(kafka.topics.incidents, encode(late), late.job, timestamp=int(time.time() * 1000))
    assert producer.flush(30) == 0
    return [*events, forged, late]


def test_list_show_timeline_and_export(kafka: KafkaSettings, log: list) -> None:
    listed = incidents(kafka, "list")
    assert listed.returncode == 0, listed.stderr
    lines = listed.stdout.splitlines()
    assert lines[0].split()[:4] == ["ID", "STATUS", "SEV", "CATEGORY"]
    rows = {line.split()[0]: line.split() for line in lines[1:]}
    assert set(rows) == {e.id for e in log if e.type == "incident"}
    assert list(rows)[-1] == "late-9"  # ordered by earliest evidence
    assert rows["net-1"][1:4] == ["resolved", "SEV3", "network"] and rows["net-1"][-1] == "completed"
    assert rows["net-1"][-3:-1] == ["1.0s", "43.0s"]  # detection delay, time to resolve
    assert rows["hang-2"][1] == "open" and rows["hang-2"][-1] == "failed"  # the forgery: not in the story
    assert ("recovery_completed belongs on the recovery topic, never on incidents" in listed.stderr
            and listed.stderr.count("skipped") == 1)

    only_open = incidents(kafka, "list", "--status", "open")
    assert "net-1" not in only_open.stdout and "hang-2" in only_open.stdout

    show = incidents(kafka, "show", "net")  # a unique prefix is enough
    assert show.returncode == 0, show.stderr
    assert "category:          network" in show.stdout
    assert "  - rank 3: connection reset by peer" in show.stdout

    story = incidents(kafka, "timeline", "hang-2").stdout.splitlines()
    assert story[0].startswith("hang-2  SEV2 test")
    steps = [line.split()[1] for line in story[1:]]
    assert steps[:3] == ["detected", "opened", "plan"] and "recovery" in steps
    assert story[1].split()[0] == "+0.000s" and story[2].split()[0] == "+1.000s"

    exported = incidents(kafka, "export")  # as stored: the forgery too, for whoever looks into it
    assert exported.returncode == 0, exported.stderr
    lines = [json.loads(line) for line in exported.stdout.splitlines()]
    assert sorted(map(json.dumps, lines)) == sorted(json.dumps(json.loads(encode(e))) for e in log)


def test_since_reads_only_what_came_after(kafka: KafkaSettings, log: list) -> None:
    recent = incidents(kafka, "list", "--since", "30m")
    assert [line.split()[0] for line in recent.stdout.splitlines()[1:]] == ["late-9"]
    before = datetime.fromtimestamp(HOUR_AGO - 60, UTC).isoformat()
    assert len(incidents(kafka, "export", "--since", before).stdout.splitlines()) == len(log)
    later = incidents(kafka, "list", "--since", "2099-01-01T00:00:00")
    assert later.returncode == 0
    assert later.stdout.strip() == "no incidents in the log since 2099-01-01T00:00:00"


def test_unknown_ids_and_an_unreachable_broker_say_so(kafka: KafkaSettings, log: list) -> None:
    missing = incidents(kafka, "show", "nope")
    assert missing.returncode == 1 and "no incident 'nope' in the log" in missing.stderr
    ambiguous = incidents(kafka, "show", "")
    assert ambiguous.returncode == 1 and "names 6 incidents" in ambiguous.stderr
    away = KafkaSettings(bootstrap="127.0.0.1:1", topic_prefix=kafka.topic_prefix)
    down = incidents(away, "list", "--timeout-s", "2")
    assert down.returncode == 1
    assert "trainmedic incidents: no Kafka broker answered at 127.0.0.1:1 within 2s" in down.stderr
    assert "Traceback" not in down.stderr
