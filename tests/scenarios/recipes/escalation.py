"""Recordings of a fault that comes back: when a repeat escalates to the node's isolation and when
it must not."""

from __future__ import annotations

from sim import Job

from recipes.error_texts import CUDA_IMA, CUDA_LAUNCH, GLOO_PEER
from recipes.kit import crash, expect, recording, restart, running, scenario


@scenario
def escalation_link_flaps(rng):
    """Three flaps of node-01's ib0 within two minutes (one switch reboot): one episode, each
    flap SEV3, none escalated (separate episodes would be: tests/unit/streams/test_escalation)."""
    downs = [(20.0, 21.0), (80.0, 81.5), (140.0, 141.0)]
    c, job = running(rng, 200, links=lambda node, t: not (
        node == "node-01" and any(a <= t < b for a, b in downs)))
    job.run(1, 195, step_time=2.0)
    flap = [expect("open", "link_flap", "SEV3", "node-01", "job-a"),
            expect("resolved", "link_flap", "SEV3", "node-01", "job-a")]
    return recording(c, *(flap * 3))


@scenario
def escalation_sev2_same_node(rng):
    """Two CUDA errors on node-01 within 30 minutes: the second isolates the node (SEV1)."""
    c, job = running(rng, 150)
    job.run(1, 30.3)
    crash(job, 30.3, [3], CUDA_IMA, 30.8)
    second = restart(c, 40, 90.3)
    crash(second, 90.3, [2], CUDA_LAUNCH, 90.8)
    restart(c, 105, 145, gen=2, hosts=(0, 2, 3))
    return recording(c, expect("open", "cuda_error", "SEV2", "node-01", "job-a", 30.3, 1.0),
                     expect("resolved", "cuda_error", "SEV2", "node-01", "job-a"),
                     expect("open", "cuda_error", "SEV1", "node-01", "job-a", 90.3, 1.0),
                     expect("resolved", "cuda_error", "SEV1", "node-01", "job-a"))


@scenario
def escalation_same_bug(rng):
    """The training script raises the same ValueError at every generation, on rank 0 of
    node-00: the job's failure, SEV2 each time, never a node's SEV1 (the coordinator backs off
    and gives up on the job)."""
    c, _ = running(rng, 75, start_at=None)
    out = []
    for gen, t in enumerate((0.5, 25.5, 50.5)):
        run = Job(c, gen=gen)
        run.start(t)
        run.run(t + 0.5, t + 15.3)
        crash(run, t + 15.3, [0], f"ValueError: bad label -{gen + 1} in batch {17 * gen + 5}", t + 15.8,
              GLOO_PEER)
        out += [expect("open", "software_error", "SEV2", "node-00", "job-a", t + 15.3, 1.0,
                       ranks=[0])]
        if gen < 2:  # the next generation's first steps resolve it
            out += [expect("resolved", "software_error", "SEV2", "node-00", "job-a")]
    return recording(c, *out)
