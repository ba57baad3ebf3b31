"""The host agent through the real broker: heartbeats with the links of a fake sysfs, and a flap."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from tests.integration.producers.consume import consume_until
from tests.unit.producers.sysfs import cluster_node
from trainmedic.bus.settings import KafkaSettings
from trainmedic.producers.agent import open_agent, run_agent
from trainmedic.producers.config import HostAgentConfig
from trainmedic.producers.faults import LinkFlap
from trainmedic.schemas import NodeHeartbeat

pytestmark = pytest.mark.kafka


def test_heartbeats_carry_the_links_and_a_flap_shows_as_down_then_up(
    kafka: KafkaSettings, group_id: str, tmp_path: Path,
) -> None:
    config = HostAgentConfig(node="n07", interval_s=0.05, sysfs=cluster_node(tmp_path), links=("eth0", "ib0"),
                             inject=(LinkFlap(link="eth0", at_s=0.0, for_s=0.5),))
    stop = threading.Event()
    start = time.time()
    agent = open_agent(config, start)
    thread = threading.Thread(target=run_agent, args=(config, kafka, agent, stop))
    thread.start()

    def flapped_and_back(records: list) -> bool:
        states = [eth0_up(r.event) for r in records]
        return False in states and states[-1] is True

    try:
        records = consume_until(kafka, kafka.topics.node, group_id, flapped_and_back)
    finally:
        stop.set()
        thread.join(30)
    assert not thread.is_alive()
    beats = sorted((r.event for r in records), key=lambda beat: beat.ts)
    assert all(isinstance(b, NodeHeartbeat) and b.node == "n07" and b.interval == 0.05 for b in beats)
    assert all(r.key == "n07" for r in records)
    # The flap window is judged on the heartbeat's own time, the same `now` the agent used.
    assert all(eth0_up(b) is (b.ts - start >= 0.5) for b in beats)
    assert all(link.up for b in beats for link in b.links if link.name == "ib0")


def eth0_up(beat: NodeHeartbeat) -> bool:
    return next(link.up for link in beat.links if link.name == "eth0")
