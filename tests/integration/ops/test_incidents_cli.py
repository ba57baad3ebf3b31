"""`trainmedic incidents` as a real process over a recorded incident log on a real broker: the
detector's incidents and the coordinator's recovery events, two topics told as one story."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from datetime import UTC, datetime

import pytest
from confluent_kafka import Producer

from tests.unit.ops.incident_log import placed
from trainmedic.bus.settings import KafkaSettings
from trainmedic.schemas import Incident, RecoveryCompleted, RecoveryPlanned, WorkerStepped, encode

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
    rows = {line.split()[0]: line.split() for line in lines[1:-1]}
    assert set(rows) == {e.id for e in log if e.type == "incident"}
    assert list(rows)[-1] == "late-9"  # ordered by earliest evidence
    assert rows["net-1"][1:4] == ["resolved", "SEV3", "network"] and rows["net-1"][-1] == "completed"
    assert (rows["net-1"][-4], rows["net-1"][-2]) == ("1.0s", "43.0s")  # detection delay, time to resolve
    assert lines[-1].startswith("DETECT: first evidence → incident decided; PUBLISHED: first evidence → "
                                "incident on Kafka")
    assert rows["hang-2"][1] == "open" and rows["hang-2"][-1] == "failed"  # the forgery: not in the story
    assert ("recovery_completed belongs on the recovery topic, never on incidents" in listed.stderr
            and listed.stderr.count("skipped") == 1)

    only_open = incidents(kafka, "list", "--status", "open")
    assert "net-1" not in only_open.stdout and "hang-2" in only_open.stdout

    show = incidents(kafka, "show", "net")  # a unique prefix is enough
    assert show.returncode == 0, show.stderr
    assert "category:          network" in show.stdout
    assert "+1.000s  rank 3: connection reset by peer" in show.stdout

    story = incidents(kafka, "timeline", "hang-2").stdout.splitlines()
    assert story[0].startswith("hang-2  SEV2 test")
    steps = [line.split()[2] for line in story[1:]]
    assert steps[:3] == ["detected", "opened", "plan"] and "recovery" in steps
    assert story[1].split()[:2] == ["00:00:29.000", "+0.000s"] and story[2].split()[1] == "+1.000s"

    exported = incidents(kafka, "export")  # as stored: the forgery too, for whoever looks into it
    assert exported.returncode == 0, exported.stderr
    lines = [json.loads(line) for line in exported.stdout.splitlines()]
    assert sorted(map(json.dumps, lines)) == sorted(json.dumps(json.loads(encode(e))) for e in log)


def test_since_reads_only_what_came_after(kafka: KafkaSettings, log: list) -> None:
    recent = incidents(kafka, "list", "--since", "30m")
    assert [line.split()[0] for line in recent.stdout.splitlines()[1:-1]] == ["late-9"]
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


def test_the_numbers_come_from_kafka_times_and_the_jobs_steps(kafka: KafkaSettings) -> None:
    """An exit seen at t0, decided at +1 s but on Kafka at +3.6 s (the broker's message time), its
    restart acknowledged at +4.7 s and the new generation's first step at +9.6 s on
    telemetry.worker: list and show say each of these for what it is, the story in event time."""
    t0 = round(time.time() - 60, 3)
    opened = Incident(ts=t0 + 1, id="exit-7", status="open", category="process_exit", severity="SEV2",
                      action="restart", job="llm", node="n1", ranks=(3,), first_ts=t0,
                      evidence=(f"{t0 + 0.8:.3f} rank 2 on n1: no step since {t0 - 0.5:.3f}",
                                f"{t0:.3f} rank 3 on n1: exited with signal 9"))
    plan = RecoveryPlanned(ts=t0 + 3.8, plan_id="p-7", incident_id="exit-7", job="llm", kind="restart",
                           generation=1, nodes=("n0", "n1"), previous=("n0", "n1"))
    done = RecoveryCompleted(ts=t0 + 4.7, plan_id="p-7", job="llm", generation=1)
    steps = [WorkerStepped(ts=t0 + at, node="n0", job="llm", rank=rank, world_size=2, generation=gen,
                           step=step, step_time=0.25)
             for at, rank, gen, step in ((-1.0, 0, 0, 40), (10.1, 1, 1, 38), (9.6, 0, 1, 38),
                                         (10.4, 0, 1, 39))]
    producer = Producer(kafka.client_config())
    for topic, event, key, stamp in ((kafka.topics.incidents, opened, "llm", t0 + 3.6),
                                     (kafka.topics.recovery, plan, "llm", plan.ts),
                                     (kafka.topics.recovery, done, "llm", done.ts),
                                     *((kafka.topics.worker, e, "llm", e.ts + 0.05) for e in steps)):
        producer.produce(topic, encode(event), key, timestamp=int(round(stamp * 1000)))
    assert producer.flush(30) == 0

    listed = incidents(kafka, "list")
    assert listed.returncode == 0, listed.stderr
    header, row = listed.stdout.splitlines()[:2]
    names = header.replace("OPENED (UTC)", "OPENED").replace("RESOLVED IN", "RESOLVED").split()
    cells = dict(zip(names, row.split()[:6] + row.split()[7:], strict=True))  # OPENED: a date and a time
    assert (cells["DETECT"], cells["PUBLISHED"], cells["RECOVERY"]) == ("1.0s", "3.6s", "completed")

    show = incidents(kafka, "show", "exit-7")
    assert show.returncode == 0, show.stderr
    assert "publication delay: 3.6s (first evidence → on Kafka)" in show.stdout
    assert "recovery acked:    4.7s (first evidence → every command done)" in show.stdout
    assert "time to resume:    9.6s (first evidence → first step of llm generation 1 after the repair)" \
        in show.stdout
    assert not re.search(r"\d{9,}\.\d", show.stdout), show.stdout  # no raw unix instants

    story = incidents(kafka, "timeline", "exit-7").stdout.splitlines()[1:]
    assert [line.split()[1:3] for line in story] == [
        ["+0.000s", "detected"], ["+0.000s", "evidence"], ["+0.800s", "evidence"], ["+1.000s", "opened"],
        ["+3.600s", "on"], ["+3.800s", "plan"], ["+4.700s", "acknowledged"], ["+9.600s", "resumed"]]
    assert story[0].split()[0] == datetime.fromtimestamp(t0, UTC).strftime("%H:%M:%S.%f")[:-3]
