"""One identity per node (issue 45, Deliver 6) on the bed: each node host writes as a principal of its
own with a telemetry key of its own (`broker add-node`, docs/deployment.md step 2), and nothing a host
says about another host is believed. Each test fails on the code before: there every node wrote as the
shared `executor`/`agent` principals, every record about any node was believed, a flood of invented
jobs raised an incident each, and a node key copied into a keys folder by hand was a coordinator's."""

from __future__ import annotations

import os
import shutil
import signal
import time
import uuid

import pytest
from confluent_kafka import KafkaError as RdKafkaError

from tests.multihost.deploy import BROKER_PORT, OPERATOR, Cluster, public_keys
from tests.multihost.training import JOB, isolated, job, last_step, opened, steps_logged
from trainmedic.bus import clients
from trainmedic.bus.producer import EventProducer
from trainmedic.bus.settings import KafkaSettings
from trainmedic.recovery.keyring import load_signing, node_role
from trainmedic.schemas import (
    Command,
    CommandAction,
    Incident,
    RecoveryCompleted,
    RecoveryPlanned,
    WorkerFailed,
    WorkerStarted,
    WorkerStepped,
)

pytestmark = pytest.mark.multihost

REFUSED = "TOPIC_AUTHORIZATION_FAILED"


def as_host(cluster: Cluster, host: str, role: str) -> KafkaSettings:
    """`role`'s settings from `host`'s own credentials folder, on the test's prefix."""
    folder = cluster.site.home(host) / "credentials"
    return KafkaSettings.from_env({"TRAINMEDIC_CREDENTIALS_DIR": str(folder),
                                   "TRAINMEDIC_TOPIC_PREFIX": cluster.prefix}, role=role)


def flood(node: str, now: float, jobs: int = 200) -> list:
    """The red team's flood: for each of `jobs` invented jobs a start (hang floor 1 s) and ten steps,
    naming `node`: 2,200 records for 200 jobs."""
    out = []
    for n in range(jobs):
        name = f"invented-{n}"
        out.append(WorkerStarted(ts=now, node=node, job=name, rank=0, world_size=1, hang_floor_s=1.0))
        out += [WorkerStepped(ts=now, node=node, job=name, rank=0, world_size=1, step=s, step_time=0.01)
                for s in range(10)]
    return out


def unplaced(cluster: Cluster) -> list:
    return [e for e in cluster.events("dlq") if e.reason.startswith("unplaced: node n1")]


def unverified(cluster: Cluster) -> list:
    return [e for e in cluster.events("dlq") if e.reason.startswith("unverified: not written by node")]


def test_what_one_node_writes_about_others_is_refused_and_a_real_failure_still_heals(cluster) -> None:
    """With n1's own credentials: two `worker_error`s of the real job naming n3, 20 `worker_start`s 16
    generations ahead naming n2 and n3, and the 2,200-record flood naming n3 (dead-lettered as
    unverified); then, naming n1 itself, 10 starts of the job 16 generations ahead and two errors of
    its rank on n3 (dead-lettered as unplaced: the coordinator placed no rank of the job on n1). No
    incident, no isolation; a real SIGKILL of the rank on n3 then gets its incident and heals."""
    deployed = cluster()
    deployed.submit(job(deployed, 100_000, nodes=("n2", "n3")))
    deployed.wait(lambda: last_step(deployed) >= 5, 180, "the job stepping on n2 and n3")
    now = time.time()
    forged = [WorkerFailed(ts=now, node="n3", job=JOB, rank=1, world_size=2,
                           error="RuntimeError: CUDA error: an illegal memory access was encountered")] * 2
    forged += [WorkerStarted(ts=now, node=node, job=JOB, rank=rank, world_size=2, generation=16)
               for _ in range(10) for rank, node in enumerate(("n2", "n3"))]
    forged += flood("n3", now)
    # under n1's own name (its MAC verifies): a start 16 generations ahead and an error of the job's
    # rank 1, which the coordinator placed on n3: no placement of n1's says so
    own = [WorkerStarted(ts=now, node="n1", job=JOB, rank=0, world_size=2, generation=16)] * 10
    own += [WorkerFailed(ts=now, node="n1", job=JOB, rank=1, world_size=2,
                         error="RuntimeError: CUDA error: an illegal memory access was encountered")] * 2
    forged += own
    n1 = as_host(deployed, "n1", "executor")
    assert n1.extra["sasl.username"] == "node-n1" and n1.telemetry_key.node == "n1"
    with EventProducer(n1) as producer:
        for event in forged:
            producer.send(deployed.settings().topics.worker, event, key=event.job)
    deployed.wait(lambda: len(unverified(deployed)) >= len(forged) - len(own), 60,
                  "every forged record refused")
    deployed.wait(lambda: len(unplaced(deployed)) >= len(own), 60, "n1's own forgeries refused as unplaced")
    time.sleep(5)  # the flood's hang floor is 1 s: long past
    assert [(i.category, i.node) for i in opened(deployed)] == []
    assert isolated(deployed) == set()

    pid = deployed.rank_pid("n3", JOB)
    os.kill(pid, signal.SIGKILL)
    killed = time.time()
    deployed.wait(lambda: [r for r in deployed.records("recovery") if isinstance(r.event, RecoveryCompleted)
                           and r.event.job == JOB and r.timestamp_ms / 1000 > killed], 120,
                  "the real failure's recovery")
    assert ("process_exit", JOB) in {(i.category, i.job) for i in opened(deployed)}
    assert isolated(deployed) == set()
    print(f"forged with n1's credentials: {len(forged) - len(own)} records about n2 and n3 and {len(own)} "
          "about the job's ranks under n1's own name, all refused; the real kill healed")


def test_a_flood_of_invented_jobs_from_a_nodes_own_credentials_follows_no_job(cluster) -> None:
    """The same flood, naming n1 with n1's own credentials (a node may speak for itself, but only of
    the ranks the coordinator placed on it): no invented job is followed, each of its 200 starts is
    dead-lettered as unplaced, and nothing is opened or isolated. Before: 200 SEV1 hang incidents (and
    with storms alone, a storm and 10 of them a minute)."""
    deployed = cluster()
    with EventProducer(as_host(deployed, "n1", "executor")) as producer:
        for event in flood("n1", time.time()):
            producer.send(deployed.settings().topics.worker, event, key=event.job)
    letters = deployed.wait(lambda: (found := unplaced(deployed)) and len(found) >= 200 and found, 60,
                            "the flood's 200 starts refused")
    time.sleep(5)  # the flood's hang floor is 1 s: long past
    assert {e.reason.split(" (")[0] for e in letters} == {
        f"unplaced: node n1 holds no placement of rank 0 of job invented-{n} generation 0"
        for n in range(200)}
    assert opened(deployed) == [] and isolated(deployed) == set()
    print(f"flood of 200 invented jobs on n1 under its own name: {len(letters)} starts dead-lettered as "
          "unplaced, no incident (was 200 SEV1)")


def test_a_node_key_copied_by_hand_never_signs_a_command(cluster) -> None:
    """n1's node key copied into n2's keys folder (a mistake; before roles it was trusted as a
    coordinator's there): a stop of the real job on n2 signed with n1's node key, written with the
    coordinator's Kafka credentials, is refused by n2 and the job steps on."""
    deployed = cluster()
    site = deployed.site
    for pub in public_keys(site.home("n1")):
        shutil.copy2(pub, site.home("n2") / "keys" / pub.name)
    deployed.submit(job(deployed, 100_000, nodes=("n1", "n2")))
    deployed.wait(lambda: last_step(deployed) >= 5, 180, "the job stepping on n1 and n2")
    start = next(e for e in deployed.events("commands") if isinstance(e, Command) and e.node == "n2"
                 and e.job == JOB and e.action == "start")
    n1_key = load_signing(site.home("n1") / "keys", node_role("n1"))
    stop = n1_key.sign(start.model_copy(update={"id": f"forged-{uuid.uuid4().hex[:8]}", "ts": time.time(),
                                                "action": CommandAction.STOP, "signature": None,
                                                "key_id": None}))
    with EventProducer(as_host(deployed, "control", "coordinator")) as producer:
        producer.send(deployed.settings().topics.commands, stop, key="n2")
    def answered() -> list:
        return [e for e in deployed.events("acks") if getattr(e, "command_id", None) == stop.id]

    acks = deployed.wait(answered, 60, "n2's answer to the forged stop")
    assert acks[0].status == "refused" and "key" in acks[0].reason, acks[0]
    before = last_step(deployed)
    deployed.wait(lambda: last_step(deployed) >= before + 8, 60, "the job stepping on after the forged stop")
    print(f"a command signed with n1's node key, copied by hand to n2: refused ({acks[0].reason})")


def test_a_removed_nodes_writes_are_refused_within_seconds(cluster) -> None:
    """`broker remove-node n1` on the broker's host: n1's connected producer is refused within 5 s,
    and the detector, which no longer gets n1's heartbeats, loses n1."""
    deployed = cluster()
    site = deployed.site
    producer = clients.producer(as_host(deployed, "n1", "agent"), {"message.timeout.ms": 10_000})
    answers: list[RdKafkaError | None] = []

    def write() -> None:
        producer.produce(deployed.settings().topics.node, b"{}", partition=0,
                         on_delivery=lambda err, _msg: answers.append(err))
        producer.flush(15)

    write()
    assert answers == [None]
    try:
        removed = time.monotonic()
        site.cli(site.brokers[0], "broker", "remove-node", "n1")
        while answers[-1] is None and time.monotonic() - removed < 10:
            write()
        took = time.monotonic() - removed
        assert answers[-1] is not None and answers[-1].name() == REFUSED, answers[-1]
        assert took < 5, f"refused {took:.1f} s after remove-node"
        lost = deployed.wait(lambda: [i for i in opened(deployed) if isinstance(i, Incident)
                                      and i.category == "node_lost" and i.node == "n1"], 60, "n1 lost")
        print(f"remove-node n1: its writes refused {took:.2f} s after the command; node_lost {lost[0].id}")
    finally:
        site.add_node("n1")  # the next test's n1: a principal and a folder anew


def test_a_host_enrolled_while_a_job_runs_joins_by_token_and_the_job_grows_onto_it(cluster) -> None:
    """A fourth host, n4, in no config (the spare n3 cordoned): the operator's `nodes enroll n4`
    prints a join token; on n4, `trainmedic node --join TOKEN --bootstrap ...` is the only step (no
    file copied by hand). The coordinator adds n4 live, the job grows onto it; `nodes remove n4` then
    refuses n4's writes within 5 s and moves the job off it. Before: a host joined only through the
    YAML `nodes:`, a restart and files copied by hand."""
    deployed = cluster()
    site = deployed.site
    broker = site.brokers[0]
    deployed.spawn(broker, "registrar", "broker", "registrar")
    deployed.wait(lambda: "registrar ready on" in deployed.log("registrar"), 60, "the registrar")
    site.cli(OPERATOR, "nodes", "cordon", "n3", "--reason", "only n4 may grow the job",
             env=deployed.env(OPERATOR))
    spec = job(deployed, 100_000, nodes=("n1", "n2"))
    spec["throughput"] = {1: 1.0e14, 2: 2.0e14, 3: 3.0e14}
    deployed.submit(spec)
    deployed.wait(lambda: last_step(deployed) >= 5, 180, "the job stepping on n1 and n2")

    site.bed.add("n4")
    site.home("n4").mkdir()
    enrolled = site.cli(OPERATOR, "nodes", "enroll", "n4", "--expires", "10m", env=deployed.env(OPERATOR))
    token = enrolled.strip().splitlines()[-1]
    assert not (site.home("n4") / "credentials").exists() and not (site.home("n4") / "keys").exists()
    joined = time.time()
    bootstrap = f"{site.bed.hosts[broker].address}:{BROKER_PORT}"
    token_file = site.home("n4") / "token"  # what the operator sends the host: the token, nothing else
    token_file.write_text(token + "\n")
    token_file.chmod(0o600)
    deployed.spawn("n4", "n4", *deployed.node_args("n4"), "--join", f"@{token_file}",
                   "--bootstrap", bootstrap)
    grown = deployed.wait(lambda: [e for e in deployed.events("recovery") if isinstance(e, RecoveryPlanned)
                                   and "n4" in e.nodes], 180, "a plan that grows the job onto n4")
    deployed.wait(lambda: deployed.rank_pid("n4", JOB) is not None and last_step(deployed) > 0
                  and any(gen >= grown[0].generation for gen, _ in steps_logged(deployed)), 180,
                  "the job stepping on n1, n2 and n4")
    took = time.time() - joined
    listed = site.cli(OPERATOR, "nodes", "list", env=deployed.env(OPERATOR))
    assert any(line.split()[:2] == ["n4", "ready"] for line in listed.splitlines()), listed

    agent = clients.producer(as_host(deployed, "n4", "agent"), {"message.timeout.ms": 10_000})
    answers: list[RdKafkaError | None] = []

    def write() -> None:
        agent.produce(deployed.settings().topics.node, b"{}", partition=0,
                      on_delivery=lambda err, _msg: answers.append(err))
        agent.flush(15)

    write()
    assert answers == [None]
    asked = time.monotonic()  # the command's own start (a Python process) counts too
    site.cli(OPERATOR, "nodes", "remove", "n4", "--reason", "test", env=deployed.env(OPERATOR))
    removed = time.monotonic()
    while answers[-1] is None and time.monotonic() - removed < 10:
        write()
    refused, returned = time.monotonic() - asked, time.monotonic() - removed
    assert answers[-1] is not None and answers[-1].name() == REFUSED, answers[-1]
    assert refused < 5, f"refused {refused:.1f} s after `nodes remove` started"
    deployed.wait(lambda: [e for e in deployed.events("recovery") if isinstance(e, RecoveryPlanned)
                           and e.generation > grown[0].generation and "n4" not in e.nodes], 60,
                  "a plan that moves the job off n4")
    print(f"n4 enrolled by token while the job ran: stepping on it {took:.1f} s after `node --join`; "
          f"`nodes remove n4`: its writes refused {refused:.2f} s after the command started "
          f"({returned:.2f} s after it returned)")
