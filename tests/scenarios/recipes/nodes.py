"""Recordings of whole nodes going silent: lost, leaving on purpose, or all cut off at once."""

from __future__ import annotations

from sim import Cluster, Job, node_name

from recipes.error_texts import GLOO_PEER, NCCL_PEER
from recipes.kit import expect, recording, restart, running, scenario


@scenario
def node_lost_gloo(rng):
    """node-02 dies; every peer reports a gloo error and exits. Exactly one node_lost; it
    resolves when the node reports again."""
    c, job = running(rng, 120, dead={"node-02": (30.2, 80.0)})
    job.run(1, 30.2)
    job.fail(30.5, [0, 1, 2, 3, 6, 7], GLOO_PEER, spread=0.05)
    restart(c, 45, 110, hosts=(0, 1, 3))
    return recording(c, expect("open", "node_lost", "SEV1", "node-02", "job-a", 30.2, 6.0, ranks=[4, 5]),
                     expect("resolved", "node_lost", "SEV1", "node-02", "job-a"))


@scenario
def node_lost_nccl_early(rng):
    """Peers report NCCL errors 0.1 s after node-01 dies, long before its heartbeat timeout.
    The recording is shuffled (replay orders it)."""
    c, job = running(rng, 60, dead={"node-01": (30.05, 999)})
    job.run(1, 30.05)
    job.fail(30.15, [0, 1, 4, 5, 6, 7], NCCL_PEER)
    rng.shuffle(c.events)
    return recording(c, expect("open", "node_lost", "SEV1", "node-01", "job-a", 30.05, 6.0, ranks=[2, 3]))


@scenario
def node_lost_shared_node(rng):
    """node-01 runs ranks of two jobs: one incident that names no single job."""
    c, a = running(rng, 60, dead={"node-01": (30.2, 999)}, hosts=(0, 1), ranks_per_node=1)
    a.run(1, 30.2)
    b = Job(c, "job-b", hosts=(1, 2, 3), ranks_per_node=1)
    b.start(0.5)
    b.run(1, 30.2)
    a.fail(30.6, [0], GLOO_PEER)
    b.fail(30.7, [1, 2], NCCL_PEER)
    return recording(c, expect("open", "node_lost", "SEV1", "node-01", None, 30.2, 6.0))


@scenario
def node_leaving_planned(rng):
    """node-02 is shut down on purpose: its last heartbeat says it leaves, the coordinator's
    re-plan stops every rank (node-02's go down with the node), and generation 1 runs on the
    other three. Its silence is expected: no node_lost, no failure.

    What `trainmedic node` stopped with SIGTERM looks like to the detector (docs/coordinator.md,
    "A node that leaves by itself")."""
    c, job = running(rng, 120, dead={"node-02": (30.05, 999)}, start_at=None)
    c.emit(30.1, type="node_heartbeat", node="node-02", interval=c.interval, leaving=True)
    job.start(0.5)
    job.run(1, 30.0)
    for rank in range(job.world):
        if job.node_of(rank) == "node-02":  # stopped as the node shut down: not marked as a plan's stop
            job.worker(31.0 + 0.01 * rank, rank, "worker_exit", exit_code=None, signal=15)
        else:
            job.worker(31.5 + 0.01 * rank, rank, "worker_exit", exit_code=None, signal=15, stopped=True)
    restart(c, 40, 110, hosts=(0, 1, 3))
    return recording(c)


@scenario
def telemetry_gap_all_nodes(rng):
    """Every node goes quiet at the same moment for 20 s (the broker was down, the producers
    dropped what they could not send), then reports again and the job steps on. One
    telemetry_gap, resolved when the telemetry flows again; no node_lost, no hang."""
    c, job = running(rng, 90, dead={node_name(n): (30.2, 50.2) for n in range(Cluster.nodes)})
    job.run(1, 90)
    return recording(c, expect("open", "telemetry_gap", "WARN", None, None, 30.2, 6.0),
                     expect("resolved", "telemetry_gap", "WARN", None, None))
