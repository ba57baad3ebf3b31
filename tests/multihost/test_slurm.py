"""trainmedic under a real Slurm on the bed (issue 46): munge, slurmctld on the control host, a slurmd on
each node host; a job submitted with sbatch on 2 nodes + 1 spare, its `trainmedic node`s Slurm steps.
A rank killed is healed in place; a node host killed (its slurmd, its node service, its ranks) moves the
job to the spare and `trainmedic slurm drains` drains the node in Slurm with trainmedic's reason; the
node back, trainmedic re-admits it and Slurm resumes it. The numbers it prints are docs/slurm.md's."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from tests.multihost.deploy import CLI, OPERATOR, Cluster, Site
from tests.multihost.slurm import Slurm, unable
from tests.multihost.training import check_losses, first_step_after, job, last_step
from trainmedic.schemas import CommandAcked, Incident, NodeReadmitted, RecoveryCompleted, RecoveryPlanned

pytestmark = pytest.mark.multihost

STEPS = 160


@pytest.fixture
def slurm_allowed() -> None:
    reason = unable()
    if reason is not None:
        if os.environ.get("CI") == "true":
            pytest.fail(f"CI must run the Slurm tests: {reason}")
        pytest.skip(reason)


@pytest.fixture
def slurm(slurm_allowed: None, site: Site) -> Iterator[Slurm]:
    made = Slurm(site.bed, "control", site.nodes)
    try:
        made.start()
        yield made
    finally:
        made.close()


def sbatch(deployed: Cluster, slurm: Slurm, steps: int = STEPS, daemon: bool = False) -> str:
    """The job (without nodes: the allocation's) written by `trainmedic slurm sbatch` and submitted; the
    Slurm job id. `daemon`: the nodes run their own `trainmedic node`."""
    spec = {k: v for k, v in job(deployed, steps).items() if k != "nodes"}
    path = deployed.root / "slurm-job.yaml"
    path.write_text(yaml.safe_dump(spec))
    for node in deployed.site.nodes:
        deployed.make_sysfs(node)
    env = {**deployed.env(OPERATOR), **slurm.env, "TRAINMEDIC_EXECUTOR_RANKS_AS_ROOT": "true"}
    script = subprocess.run(
        [*CLI, "slurm", "sbatch", str(path), "--nodes", "2", "--spares", "1", "--logs", str(deployed.root),
         "--node-home", str(deployed.site.bed.root / "hosts" / "{node}"),
         f"--sbatch=--output={deployed.root / 'batch.log'}",
         *(["--daemon-nodes"] if daemon
           else ["--", *deployed.node_options("{node}"), "--data-interface", "eth0"])],
        env=env, capture_output=True, text=True, timeout=60, check=True).stdout
    done = subprocess.run(["sbatch", "--parsable"], input=script, env=env, capture_output=True, text=True,
                          timeout=30, check=True)
    return done.stdout.strip().split(";")[0]


def batch_log(deployed: Cluster) -> str:
    path = deployed.root / "batch.log"
    return path.read_text(errors="replace") if path.exists() else ""


def test_a_job_under_slurm_is_healed_in_its_allocation_and_its_lost_node_drained_then_resumed(
        site: Site, slurm: Slurm, cluster) -> None:
    deployed = cluster(node_services=False, readmit_probation_s=10)
    with open(deployed.root / "drains.log", "wb") as out:
        drains = subprocess.Popen([*CLI, "slurm", "drains", "--poll-s", "1"],
                                  env={**deployed.env(OPERATOR), **slurm.env}, stdout=out,
                                  stderr=subprocess.STDOUT)
    try:
        slurm_job = sbatch(deployed, slurm)
        name = f"mh-slurm{slurm_job}"

        def stepped(n: int) -> bool:
            assert slurm.running(slurm_job), f"the batch script ended early:\n{batch_log(deployed)[-3000:]}"
            return last_step(deployed, name) >= n

        deployed.wait(lambda: stepped(10), 240, "the Slurm job's step 10")
        said = batch_log(deployed)
        assert "job mh-slurm" in said and "spares n3" in said, said

        # (a) a rank killed: healed in place, on the same nodes
        pid = deployed.rank_pid("n2", name)
        assert pid is not None
        os.kill(pid, signal.SIGKILL)
        killed = time.time()
        deployed.wait(lambda: [r for r in deployed.records("recovery") if r.timestamp_ms / 1000 > killed
                               and isinstance(r.event, RecoveryCompleted) and r.event.job == name], 120,
                      "the rank's recovery")
        deployed.wait(lambda: first_step_after(deployed, killed, name) > 0, 60, "a step after the kill")
        rank_s = first_step_after(deployed, killed, name)
        plans = [e for e in deployed.events("recovery") if isinstance(e, RecoveryPlanned) and e.job == name]
        assert all(set(p.nodes) == {"n1", "n2"} for p in plans), [p.nodes for p in plans]

        # (b) node n2 lost (slurmd, trainmedic node, ranks): the job moves to the spare, n2 is drained
        deployed.wait(lambda: stepped(60), 120, "step 60")
        site.bed.kill("n2")
        lost = time.time()
        moved = deployed.wait(lambda: [e for e in deployed.events("recovery")
                                       if isinstance(e, RecoveryPlanned)
                                       and e.job == name and set(e.nodes) == {"n1", "n3"}], 120,
                              "a plan on n1 and the spare n3")
        slurm.wait(lambda: slurm.reasons().get("n2", "").startswith("trainmedic: node_lost"), 90,
                   "n2 drained with trainmedic's reason")
        drained_s, reason = time.time() - lost, slurm.reasons()["n2"]
        assert slurm.states()["n2"].startswith("drain"), slurm.states()
        moved_to = moved[0].generation
        deployed.wait(lambda: first_step_after(deployed, lost, name, moved_to) > 0, 120, "a step on n3")
        node_s = first_step_after(deployed, lost, name, moved_to)
        lost_incident = [i for i in deployed.events("incidents") if isinstance(i, Incident)
                         and i.category == "node_lost" and i.node == "n2"]
        assert lost_incident and lost_incident[0].id in reason

        # the job ends on n1 and n3: the batch script exits 0, every step's loss equals a run without faults
        deployed.wait(lambda: "exit status" in batch_log(deployed), 240, "the batch script's end")
        assert "exit status 0" in batch_log(deployed), batch_log(deployed)[-3000:]
        check_losses(deployed, STEPS, name)
        shown = slurm.wait(lambda: not slurm.running(slurm_job)
                           and slurm.cmd("scontrol", "show", "job", slurm_job), 60, "the Slurm job's end")
        assert "JobState=COMPLETED" in shown and "ExitCode=0:0" in shown, shown

        # (c) n2 back (slurmd, and its node service as a site's daemon would start it): trainmedic re-admits
        # it after probation and the drain is lifted; a drain a person set on n3 is not
        slurm.cmd("scontrol", "update", "NodeName=n3", "State=DRAIN", "Reason=a person: fan check")
        slurm.start_slurmd("n2")
        deployed.spawn("n2", "n2", *deployed.node_args("n2"))
        deployed.wait(lambda: [e for e in deployed.events("recovery") if isinstance(e, NodeReadmitted)
                               and e.node == "n2"], 120, "n2 re-admitted")
        slurm.wait(lambda: slurm.states().get("n2") == "idle", 30, "n2 resumed in Slurm")
        time.sleep(3)  # rounds of the drain service: the person's drain stays
        assert slurm.reasons().get("n3") == "a person: fan check", slurm.reasons()
    finally:
        drains.terminate()
        drains.wait(30)
    said = (deployed.root / "drains.log").read_text()
    assert "drained n2: trainmedic: node_lost" in said and "resumed n2" in said, said
    print(f"(slurm) sbatch 2 nodes + 1 spare, {STEPS} steps of 0.25 s: rank kill -9 -> first step "
          f"{rank_s:.1f} s; node lost -> replanned onto {' '.join(moved[0].nodes)}, first step "
          f"{node_s:.1f} s, drained in Slurm {drained_s:.1f} s after ('{reason}'), 0 steps lost, "
          "losses equal")


def test_daemon_nodes_start_ranks_only_for_the_slurm_job_the_prolog_gave_them(slurm_allowed: None, site: Site,
                                                                              cluster) -> None:
    """A site running `trainmedic node` as a service of its own: the prolog and epilog of `trainmedic slurm
    site-files` tell it which Slurm job owns the node; the job runs there, and once the epilog took the
    node back, a job submitted outside Slurm starts no rank on it."""
    deployed = cluster(node_services=False)
    owner = str(deployed.root / "{node}" / "slurm-job")
    scripts = deployed.root / "site-files"
    subprocess.run([*CLI, "slurm", "site-files", str(scripts), "--owner-file", owner], check=True,
                   capture_output=True, timeout=60)
    slurm = Slurm(site.bed, "control", site.nodes, scripts=scripts)
    try:
        slurm.start()
        for node in site.nodes:
            deployed.spawn(node, node, *deployed.node_args(node), "--slurm-owner-file",
                           owner.format(node=node))
        deployed.wait(lambda: all("joined (announced on" in deployed.log(n) for n in site.nodes), 120,
                      "the nodes' services")
        steps = 40
        slurm_job = sbatch(deployed, slurm, steps, daemon=True)
        name = f"mh-slurm{slurm_job}"
        deployed.wait(lambda: (deployed.root / "n1" / "slurm-job").exists(), 60, "the prolog on n1")
        assert (deployed.root / "n1" / "slurm-job").read_text() == f"{slurm_job} root\n"
        deployed.wait(lambda: not slurm.running(slurm_job), 240, "the Slurm job's end")
        assert "exit status 0" in batch_log(deployed), batch_log(deployed)[-3000:]
        check_losses(deployed, steps, name)
        deployed.wait(lambda: not any((deployed.root / n / "slurm-job").exists() for n in site.nodes), 60,
                      "the epilog on every node")

        # a batch script killed outright (it cannot stop its job): the epilog takes the nodes back and
        # their services stop the job's ranks, which would otherwise go on in the next job's allocation
        slurm_job = sbatch(deployed, slurm, 100_000, daemon=True)
        name = f"mh-slurm{slurm_job}"
        deployed.wait(lambda: last_step(deployed, name) >= 3, 120, "the second job stepping")
        pids = [deployed.rank_pid(node, name) for node in ("n1", "n2")]
        slurm.cmd("scancel", "--batch", "--signal=KILL", slurm_job)
        killed = time.time()
        deployed.wait(lambda: not any(alive(pid) for pid in pids), 60, "the orphaned ranks stopped")
        evicted_s = time.time() - killed
        # the first node to see it stops its rank; the other's may end first, its peer gone
        stopped = [n for n in ("n1", "n2") if f"job {name}: no Slurm job owns this node" in deployed.log(n)]
        assert stopped, deployed.log("n1")[-2000:]
        time.sleep(3)  # the coordinator's restart, refused: no rank starts again
        assert {path.name for path in deployed.rank_logs(name, 0)} == {"g0-rank0.log"}
        assert not any(alive(deployed.rank_pid(node, name)) for node in site.nodes)

        outside = {**job(deployed, 10, nodes=("n3",)), "id": "outside"}  # n1, n2: the failed job's still
        deployed.submit(outside)
        refused = deployed.wait(lambda: [e for e in deployed.events("acks") if isinstance(e, CommandAcked)
                                         and e.job == "outside" and e.status == "refused"], 60,
                                "the nodes' refusal")
        why = refused[0].reason or ""
        assert "slurm_owner" in why and "no Slurm job owns this node" in why, why
        assert not deployed.rank_logs("outside", 0)
    finally:
        slurm.close()
    print(f"(slurm, node service) a batch script killed with SIGKILL: its ranks stopped {evicted_s:.1f} s "
          "after")


def alive(pid: int | None) -> bool:
    if pid is None:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return Path(f"/proc/{pid}/stat").read_text().split(") ")[-1][:1] != "Z"  # a zombie has ended
