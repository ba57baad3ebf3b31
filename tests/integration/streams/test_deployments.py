"""Two deployments on one Kafka cluster stay apart: with default flags, each detector owns the
names under its own prefix (app id, consumer group, checkpoint topic) and finds exactly its own
fault, never resuming the other's checkpoint."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

import trainmedic.schemas as s
from tests.integration.streams.test_detector_live import incidents_until, key, publish, stop
from tests.unit.streams.test_scenarios import load
from trainmedic.bus.admin import list_topics
from trainmedic.bus.settings import KafkaSettings
from trainmedic.streams.replay import replay

pytestmark = pytest.mark.kafka


@pytest.fixture
def other(deployment) -> KafkaSettings:
    """A second deployment on the same broker: its own prefix, its topics created."""
    return deployment()


def run_detector(settings: KafkaSettings, log: Path, until: callable, *flags: str) -> None:
    """`python -m trainmedic.streams --start earliest` with default flags (or `flags`) under `settings`'
    prefix,
    until `until()` holds; then SIGTERM (it writes its last checkpoint)."""
    env = {**os.environ, "TRAINMEDIC_KAFKA_BOOTSTRAP": settings.bootstrap,
           "TRAINMEDIC_TOPIC_PREFIX": settings.topic_prefix, "TRAINMEDIC_HOME": str(log.parent),
           # the recordings are from 2023 and produced now: their clocks are not what is tested
           "TRAINMEDIC_DETECTOR_MAX_SKEW_S": "1e10"}
    with open(log, "w") as out:
        proc = subprocess.Popen([sys.executable, "-m", "trainmedic.streams", "--start", "earliest", *flags],
                                env=env,
                                stdout=out, stderr=subprocess.STDOUT)
        try:
            until()
        finally:
            stop([proc])


def expected(recording: str) -> tuple[list[s.Event], set[tuple]]:
    events = sorted(load(recording)[0], key=lambda e: e.ts)
    return events, {key(i) for i in replay(events) if i.ts <= events[-1].ts}


# The shared app id is under the first prefix's `detector` names, which the detector principal may use.
@pytest.mark.parametrize("app_id", [None, "detector-shared"], ids=["default-flags", "one-app-id"])
def test_two_deployments_each_find_exactly_their_own_fault(
    kafka: KafkaSettings, other: KafkaSettings, group_id: str, tmp_path: Path, app_id: str | None,
) -> None:
    """With default flags each owns its names; made to share one app id, the second refuses the
    first's checkpoint (it names its owner), says so, and starts as configured."""
    flags = () if app_id is None else ("--app-id", f"{kafka.topic_prefix}{app_id}")
    deployments = [(kafka, "gpu_lost_xid79"), (other, "node_lost_gloo")]
    found: list[set[tuple]] = []
    for n, (settings, recording) in enumerate(deployments):
        events, want = expected(recording)
        publish(settings, events)
        seen: list[s.Incident] = []

        def until(settings=settings, want=want, seen=seen, n=n) -> None:
            seen += incidents_until(settings, f"{group_id}-{n}", want, give_up_s=90)
            time.sleep(1)  # a checkpoint after the fault, for the next detector to trip over

        run_detector(settings, tmp_path / f"detector-{n}.log", until, *flags)
        got = {key(i) for i in seen}
        assert want <= got, (tmp_path / f"detector-{n}.log").read_text()[-3000:]
        found.append(got)
    assert found[0].isdisjoint(found[1])
    for (settings, recording), got in zip(deployments, found, strict=True):
        assert {k[2] for k in got} == {k[2] for k in expected(recording)[1]}
        if app_id is None:
            assert settings.topics.owned("detector") + "-checkpoints" in list_topics(settings)
    refused = "is another deployment's" in (tmp_path / "detector-1.log").read_text()
    assert refused == (app_id is not None)
