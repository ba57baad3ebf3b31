"""Faults across hosts (issue 44, Deliver 6), each on the bed with the services where
docs/deployment.md puts them: the broker on `kafka`, detector and coordinator on `control`, a
`trainmedic node` on each of n1, n2, n3, the operator on the machine. The numbers each test prints
are docs/deployment.md's fault table."""

from __future__ import annotations

import os
import signal
import time

import pytest

from tests.multihost.training import (
    JOB,
    check_losses,
    first_step_after,
    isolated,
    job,
    last_step,
    opened,
    steps_logged,
)
from trainmedic.schemas import Incident, NodeHeartbeat, NodeReadmitted, RecoveryCompleted, RecoveryPlanned
from trainmedic.schemas.recovery import RecoveryKind

pytestmark = pytest.mark.multihost


def test_a_rank_killed_on_one_host_is_healed_across_hosts_with_equal_losses(cluster) -> None:
    deployed = cluster()
    steps = 60
    deployed.submit(job(deployed, steps))
    deployed.wait(lambda: last_step(deployed) >= 15, 180, "the job's step 15 on n1")
    pid = deployed.rank_pid("n2", JOB)
    assert pid is not None
    os.kill(pid, signal.SIGKILL)
    killed = time.time()
    deployed.wait(lambda: last_step(deployed) >= steps - 1, 240, "the job's last step after the kill")
    check_losses(deployed, steps)
    done = [r for r in deployed.records("recovery") if isinstance(r.event, RecoveryCompleted)
            and r.event.job == JOB and r.timestamp_ms / 1000 > killed]
    assert done, "no recovery completed after the kill"
    assert isolated(deployed) == set()
    print(f"(a) kill -9 of n2's rank: first step {first_step_after(deployed, killed):.1f} s after the kill; "
          f"{steps} of {steps} steps, losses equal")


def test_a_node_host_cut_off_is_lost_replanned_and_readmitted_and_no_healthy_node_isolated(cluster) -> None:
    deployed = cluster(readmit_probation_s=10)
    deployed.submit(job(deployed, 100_000))
    deployed.wait(lambda: last_step(deployed) >= 5, 180, "the job stepping on n1 and n2")
    deployed.site.bed.link("n2", up=False)
    cut = time.time()
    lost = deployed.wait(lambda: [r for r in deployed.records("incidents") if isinstance(r.event, Incident)
                                  and r.event.category == "node_lost" and r.event.node == "n2"],
                         60, "node_lost of n2")
    moved = deployed.wait(lambda: [e for e in deployed.events("recovery") if isinstance(e, RecoveryPlanned)
                                   and e.kind is RecoveryKind.RECONFIGURE and "n2" not in e.nodes], 60,
                          "a plan without n2")
    assert set(moved[0].nodes) == {"n1", "n3"}
    time.sleep(max(0.0, cut + 30 - time.time()))
    deployed.site.bed.heal("n2")
    healed = time.time()
    back = deployed.wait(lambda: [r for r in deployed.records("telemetry.node")
                                  if isinstance(r.event, NodeHeartbeat) and r.event.node == "n2"
                                  and r.timestamp_ms / 1000 > healed], 60, "n2's heartbeats again")
    back_s = back[0].timestamp_ms / 1000 - healed
    assert back_s < 10, f"n2 was back on Kafka {back_s:.1f} s after its link (client reconnect back-off)"
    readmitted = deployed.wait(lambda: [e for e in deployed.events("recovery")
                                        if isinstance(e, NodeReadmitted) and e.node == "n2"], 90,
                               "n2 readmitted")
    assert readmitted and isolated(deployed) == {"n2"}
    sev1 = {(i.category, i.node) for i in opened(deployed) if i.severity == "SEV1"}
    assert sev1 == {("node_lost", "n2")}, sev1
    print(f"(b) n2 cut off 30 s: node_lost {lost[0].timestamp_ms / 1000 - cut:.1f} s after the cut; "
          f"back on Kafka {back_s:.1f} s after its link; readmitted")


def test_a_node_seconds_behind_the_others_raises_no_incident(site, cluster) -> None:
    # n2's node and its ranks read a clock 2 s behind everyone's
    site.bed.skew("n2", -2.0)
    deployed = cluster()
    steps = 80
    deployed.submit(job(deployed, steps))
    deployed.wait(lambda: last_step(deployed) >= steps - 1, 240, "the job's last step")
    time.sleep(5)  # what the detector would still (wrongly) decide
    assert opened(deployed) == [], [(i.category, i.node, i.evidence) for i in opened(deployed)]
    check_losses(deployed, steps)
    print(f"(f) n2 2 s behind: 0 incidents over {steps} steps, losses equal")


def test_a_node_that_reaches_kafka_but_not_its_peer_isolates_no_node(cluster) -> None:
    deployed = cluster()
    steps = 100_000
    deployed.submit(job(deployed, steps))
    deployed.wait(lambda: last_step(deployed) >= 5, 180, "the job stepping on n1 and n2")
    deployed.site.bed.drop("n2", ["n1"])  # n2 still reaches kafka and control: only the job's link breaks
    cut = time.time()
    failed = deployed.wait(lambda: [r for r in deployed.records("incidents") if isinstance(r.event, Incident)
                                    and r.event.status == "open" and r.event.job == JOB], 90,
                           "the job's incident")
    deployed.site.bed.heal("n2")
    resumed_from = last_step(deployed)
    deployed.wait(lambda: last_step(deployed) > resumed_from + 5, 180, "the job stepping again")
    time.sleep(3)
    assert isolated(deployed) == set()
    assert [(i.category, i.node) for i in opened(deployed) if i.node and not i.job] == []
    print(f"(c) n1 and n2 cut from each other: {failed[0].event.category} on the job "
          f"{failed[0].timestamp_ms / 1000 - cut:.1f} s after the cut; 0 nodes isolated; healed, steps on")


def test_the_control_host_cut_off_and_back_loses_no_training_and_raises_nothing(cluster) -> None:
    deployed = cluster()
    deployed.submit(job(deployed, 100_000))
    deployed.wait(lambda: last_step(deployed) >= 5, 180, "the job stepping on n1 and n2")
    deployed.site.bed.link("control", up=False)
    before = last_step(deployed)
    time.sleep(30)
    during = last_step(deployed)
    deployed.site.bed.heal("control")
    healed = time.time()
    time.sleep(20)  # the detector reads the 30 s it missed; the coordinator its backlog
    assert during > before + 20, f"training stalled while the control host was away: {before} -> {during}"
    assert opened(deployed) == [], [(i.category, i.node, i.evidence) for i in opened(deployed)]
    plans = [e.kind for e in deployed.events("recovery") if isinstance(e, RecoveryPlanned)]
    assert plans == [RecoveryKind.START], plans  # one generation throughout: nothing restarted
    assert {step for _, step in steps_logged(deployed)} == set(range(last_step(deployed) + 1))
    for name in ("detector", "coordinator"):
        assert deployed.procs[name].poll() is None, deployed.log(name)[-2000:]
    print(f"(g) control host cut off 30 s: {during - before} steps trained meanwhile, 0 incidents "
          f"{time.time() - healed:.0f} s after its return")


def test_a_coordinator_cut_off_from_the_brokers_is_replaced_and_fenced_on_return(cluster) -> None:
    deployed = cluster(standby=True)
    deployed.submit(job(deployed, 100_000, nodes=("n1", "n2")))
    deployed.wait(lambda: last_step(deployed) >= 5, 180, "the job stepping on n1 and n2")
    deployed.site.bed.drop("control", ["kafka"])  # the control host's coordinator (and detector) cut off
    cut = time.time()
    deployed.wait(lambda: "leading at epoch" in deployed.log("standby"), 60, "the standby to lead")
    led = time.time()
    deployed.site.cli("operator", "nodes", "drain", "n2", env=deployed.env("operator"))
    drained = time.time()
    moved = deployed.wait(lambda: [r for r in deployed.records("recovery")
                                   if isinstance(r.event, RecoveryPlanned)
                                   and r.event.kind is RecoveryKind.RECONFIGURE], 60, "the standby's plan")
    deployed.site.bed.heal("control")
    deployed.wait(lambda: "standing down" in deployed.log("coordinator")
                  or "standby:" in deployed.log("coordinator").split("leading at epoch")[-1], 90,
                  "the old coordinator to stand down")
    deployed.wait(lambda: any(isinstance(e, RecoveryCompleted) and e.plan_id == moved[0].event.plan_id
                              for e in deployed.events("recovery")), 120, "the drain's plan completed")
    time.sleep(5)  # what the old coordinator would write if it fought back
    by_role: dict[tuple, set[str]] = {}
    for c in deployed.events("commands"):
        by_role.setdefault((c.node, c.generation, c.action), set()).add(c.id)
    assert all(len(ids) == 1 for ids in by_role.values()), by_role
    plans = [e for e in deployed.events("recovery") if isinstance(e, RecoveryPlanned)]
    assert sorted(p.generation for p in plans) == [0, 1]
    print(f"(d) control host cut from the broker: the standby led {led - cut:.1f} s later and planned the "
          f"drain {moved[0].timestamp_ms / 1000 - drained:.1f} s after it; the old one stood down on return")
