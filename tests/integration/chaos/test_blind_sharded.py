"""Blind is not dead, for a sharded detector, with real processes: the cluster of
`test_blind_detector.py` (three `trainmedic node` processes, a coordinator, a broker of the test's own)
with one `--stage ingest` instance and a `--stage decide` in place of the whole detector. The broker
stopped for 20 s is no node fault; a node killed is that node lost, in time."""

from __future__ import annotations

import signal
import sys
import time
from collections.abc import Iterator

import pytest

from tests.integration.chaos.test_blind_detector import Chaos, broker_stopped_and_started, node_killed


@pytest.fixture(scope="module")
def chaos(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Chaos]:
    made = Chaos(tmp_path_factory.mktemp("sharded"))
    with pytest.MonkeyPatch.context() as env:
        env.setenv("TRAINMEDIC_COORDINATOR_ISOLATION_CAP", "1.0")  # as in test_blind_detector.py
        try:
            made.start()
            cluster = made.cluster
            whole = cluster.procs["detector"]
            whole.send_signal(signal.SIGTERM)
            whole.wait(30)
            config = ["--start", "earliest", "--config", str(cluster.layout.root / "detector.json")]
            cluster._start("ingest", [sys.executable, "-m", "trainmedic.streams", "--stage", "ingest",
                                     "--instance", "a",
                                      *config])
            cluster._start("detector",
                           [sys.executable, "-m", "trainmedic.streams", "--stage", "decide", *config])
            deadline = time.monotonic() + 90
            while cluster.log_text("detector").count("detector ready") < 2:  # the log is appended to
                cluster.check_alive("detector")
                assert time.monotonic() < deadline, cluster.log_text("detector")[-3000:]
                time.sleep(0.3)
            time.sleep(5)  # a few heartbeats through both stages before the first fault
            yield made
        finally:
            made.close()


def test_a_broker_stopped_and_started_again_is_no_node_fault_for_a_sharded_detector(chaos: Chaos) -> None:
    broker_stopped_and_started(chaos)
    chaos.cluster.check_alive("ingest")


def test_one_node_killed_is_that_node_lost_in_time_for_a_sharded_detector(chaos: Chaos) -> None:
    node_killed(chaos)
