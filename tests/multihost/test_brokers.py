"""(e) One of three broker hosts killed and back (issue 44, Deliver 6): a KRaft cluster of three
members on hosts k1, k2, k3 (`trainmedic broker init` and `start --node-id`, docs/security.md, "A
cluster of brokers"), topics with 3 replicas and 2 in sync. k2 is killed with everything on it while
a job trains; a rank is then killed, so that detection must go on without it; k2 comes back. Nothing
the nodes sent may be missing, and nothing but the killed rank may raise an incident."""

from __future__ import annotations

import os
import re
import signal
import time

import pytest

from tests.multihost.training import JOB, first_step_after, job, last_step, opened
from trainmedic.schemas import NodeHeartbeat

pytestmark = pytest.mark.multihost

BROKERS = ("k1", "k2", "k3")  # the site fixture's broker hosts for this module
SENT = re.compile(r"heartbeats: (\d+) sent, (\d+) dropped in all")


def test_one_of_three_brokers_killed_and_back_loses_nothing_and_detection_goes_on(site, cluster) -> None:
    deployed = cluster()
    deployed.submit(job(deployed, 100_000))
    deployed.wait(lambda: last_step(deployed) >= 5, 180, "the job stepping on n1 and n2")
    assert site.bed.kill("k2") >= 1  # its broker, a member of the controller quorum
    down = time.time()
    before = last_step(deployed)
    time.sleep(10)
    pid = deployed.rank_pid("n2", JOB)
    assert pid is not None
    os.kill(pid, signal.SIGKILL)
    killed = time.time()
    deployed.wait(lambda: first_step_after(deployed, killed) > 0, 120, "the job healed with k2 down")
    healed_s = first_step_after(deployed, killed)
    restarting = time.time()
    site.restart_broker("k2")
    back_s = time.time() - restarting
    steps = last_step(deployed)
    deployed.wait(lambda: last_step(deployed) > steps + 10, 120, "the job stepping with k2 back")
    deployed.close()
    records = [r.event for r in deployed.records("telemetry.node") if isinstance(r.event, NodeHeartbeat)]
    for node in site.nodes:
        sent = SENT.findall(deployed.log(node))
        assert sent, f"{node} logged no heartbeat count"
        (queued, dropped), = sent
        on_kafka = sum(1 for r in records if r.node == node)
        assert (int(dropped), on_kafka) == (0, int(queued)), f"{node}: heartbeats lost"
    incidents = [(i.category, i.job, i.node) for i in opened(deployed)]
    assert incidents and all(cat == "process_exit" and j == JOB for cat, j, _ in incidents), incidents
    print(f"(e) k2 killed {killed - down:.0f} s before a rank: {before} -> {steps} steps with k2 down, the "
          f"rank healed {healed_s:.1f} s after its kill; k2's broker started again in {back_s:.0f} s; "
          f"0 heartbeats lost of {len(records)}, no false incident")
