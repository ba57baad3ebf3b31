"""Recordings of a job at fault, not its hardware: a killed rank, a program's bug, a collective
that times out, a hang, a refused connection."""

from __future__ import annotations

from recipes.error_texts import CUDA_IMA, NCCL_PEER, NCCL_TIMEOUT
from recipes.kit import crash, expect, recording, restart, running, scenario, xid_at


@scenario
def process_exit_oom_kill(rng):
    """Rank 5 is killed (signal 9) with no error; peers report NCCL errors and exit. One
    process_exit on rank 5's node; resolved when generation 1 steps."""
    c, job = running(rng, 80)
    job.run(1, 30.4)
    job.worker(30.4, 5, "worker_exit", exit_code=None, signal=9)
    job.fail(30.9, [0, 1, 2, 3, 4, 6, 7], NCCL_PEER)
    restart(c, 45, 75)
    return recording(c, expect("open", "process_exit", "SEV2", "node-02", "job-a", 30.4, 1.0, ranks=[5]),
                     expect("resolved", "process_exit", "SEV2", "node-02", "job-a"))


@scenario
def cuda_error_illegal_access(rng):
    """Rank 3 hits an illegal memory access (application Xid 13 follows): the program's
    fault, a restart, never node isolation."""
    c, job = running(rng, 60, tweak=xid_at("node-01", 1, 30.3, [13]))
    job.run(1, 30.3)
    crash(job, 30.3, [3], CUDA_IMA, 30.8)
    return recording(c, expect("open", "cuda_error", "SEV2", "node-01", "job-a", 30.3, 1.0, ranks=[3]))


@scenario
def software_error_all_ranks(rng):
    """The same Python bug raises on every rank within 40 ms: one incident."""
    c, job = running(rng, 60)
    job.run(1, 30.3)
    job.fail(30.3, range(8), "ValueError: Expected input batch_size (32) to match target "
                             "batch_size (31).", spread=0.005)
    return recording(c, expect("open", "software_error", "SEV2", "node-00", "job-a", 30.3, 1.0, ranks=[0]))


@scenario
def nccl_error_timeout(rng):
    """Every rank's NCCL watchdog times out; no node, GPU or rank is to blame."""
    c, job = running(rng, 60)
    job.run(1, 30.0)
    job.fail(38.0, range(8), NCCL_TIMEOUT, spread=0.02)
    return recording(c, expect("open", "nccl_error", "SEV2", None, "job-a", 38.0, 2.5))


@scenario
def hang_rank(rng):
    """Rank 5 hangs; its peers finish one more step and wait in the collective. One hang
    naming rank 5 and its node; resolved when the restarted job steps."""
    c, job = running(rng, 100)
    step, last = job.run(1, 40.0, stop_early=(5,))
    restart(c, 75, 95)
    return recording(c, expect("open", "hang", "SEV2", "node-02", "job-a", last, 20.0 + 1e-3, ranks=[5]),
                     expect("resolved", "hang", "SEV2", "node-02", "job-a"))


@scenario
def network_conn_refused(rng):
    """One rank's connection to the data service is refused; the job retries in place and
    keeps stepping (SEV3, resolved by progress)."""
    c, job = running(rng, 60)
    job.run(1, 55)
    job.worker(30.3, 2, "worker_error",
               error="ConnectionRefusedError: [Errno 111] Connection refused")
    return recording(c, expect("open", "network", "SEV3", None, "job-a", 30.3, 2.5),
                     expect("resolved", "network", "SEV3", None, "job-a"))
