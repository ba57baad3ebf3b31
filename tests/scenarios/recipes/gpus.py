"""Recordings of a GPU at fault: lost, ECC errors, NVLink errors, a driver timeout."""

from __future__ import annotations

from sim import sample_time

from recipes.error_texts import CUDA_ECC, CUDA_LAUNCH, NCCL_PEER
from recipes.kit import crash, expect, gpu_fault, recording, restart, running, scenario, xid_at


@scenario
def gpu_lost_xid79(rng):
    """GPU 0 of node-01 falls off the bus: its rank sees a CUDA error first, the Xid 79
    arrives with the next sample, peers report NCCL errors. One gpu_lost, still open when the
    job steps again at generation 1 without node-01: only node-01's own samples could resolve it."""
    c, job = running(rng, 90, tweak=xid_at("node-01", 0, 30.3, [79], then_silent=True))
    job.run(1, 30.3)
    crash(job, 30.3, [2], CUDA_LAUNCH, 30.8)
    restart(c, 45, 85, hosts=(0, 2, 3))
    return recording(c, expect("open", "gpu_lost", "SEV1", "node-01", "job-a", 30.3, 1.0, ranks=[2, 3]))


@scenario
def gpu_lost_silent(rng):
    """GPU 1 of node-03 stops reporting while the host beats; its rank fails a second
    later. The silent GPU is the root cause (decided after the 5 s silence)."""
    c, job = running(rng, 60, tweak=gpu_fault("node-03", 1, 30.0))
    job.run(1, 30.5)
    crash(job, 30.6, [7], CUDA_LAUNCH, 31.2)
    last_sample = sample_time(3, 1, 29.0)
    return recording(c, expect("open", "gpu_lost", "SEV1", "node-03", "job-a", last_sample, 7.0))


@scenario
def gpu_ecc_counter(rng):
    """ecc_dbe of node-01 GPU 1 rises; its rank reports the uncorrectable ECC error."""
    c, job = running(rng, 60, tweak=gpu_fault("node-01", 1, 30.0, ecc_dbe=1))
    job.run(1, 30.2)
    crash(job, 30.2, [3], CUDA_ECC, 30.7)
    return recording(c, expect("open", "gpu_ecc", "SEV1", "node-01", "job-a", sample_time(1, 1, 30.0), 1.0))


@scenario
def gpu_ecc_xid94(rng):
    """A contained ECC error (Xid 94) on node-00 GPU 0, the rank crashes without a message."""
    c, job = running(rng, 60, tweak=xid_at("node-00", 0, 30.0, [94]))
    job.run(1, 30.0)
    crash(job, 30.1, [0], None, 30.9, exit_code=None, signal=6)
    return recording(c, expect("open", "gpu_ecc", "SEV1", "node-00", "job-a", sample_time(0, 0, 30.0), 1.0))


@scenario
def nvlink_xid74(rng):
    """NVLink error (Xid 74) on node-02; every rank's collective fails."""
    c, job = running(rng, 60, tweak=xid_at("node-02", 1, 30.0, [74]))
    job.run(1, 30.2)
    job.fail(30.4, range(8), NCCL_PEER)
    return recording(c, expect("open", "nvlink", "SEV1", "node-02", "job-a", sample_time(2, 1, 30.0), 1.0))


@scenario
def nvlink_counter(rng):
    """nvlink_errors rises on an idle node (no job): a node incident naming no job."""

    def rising(node: str, gpu: int, t: float, sample: dict) -> None:
        if node == "node-03" and gpu == 0 and t >= 30:
            sample["nvlink_errors"] = 12 + int(t - 29) * 50

    c, job = running(rng, 60, tweak=rising, hosts=(0, 1, 2))
    job.run(1, 55)
    return recording(c, expect("open", "nvlink", "SEV1", "node-03", None, sample_time(3, 0, 30.0), 1.0))


@scenario
def gpu_driver_xid119(rng):
    """GSP timeout (Xid 119) on node-03; its ranks fail with CUDA errors, peers with NCCL."""
    c, job = running(rng, 60, tweak=xid_at("node-03", 0, 30.0, [119]))
    job.run(1, 30.3)
    crash(job, 30.35, [6, 7], CUDA_LAUNCH, 30.9)
    return recording(c, expect("open", "gpu_driver", "SEV1", "node-03", "job-a", sample_time(3, 0, 30.0),
                               1.0))
