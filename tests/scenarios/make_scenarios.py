"""Make the scenario recordings: `python tests/scenarios/make_scenarios.py`.

Each scenario writes NAME.jsonl (telemetry, as a producer would send it) and
NAME.expected.json (the incidents replay must emit, in order, with the fault's time and the
detection delay allowed). The recordings are committed: they are data; this is how they
were made.
"""

from __future__ import annotations

import json
import random
import sys
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from sim import T0, Cluster, Job, sample_time  # noqa: E402

HERE = Path(__file__).parent
SCENARIOS: dict[str, Callable[[random.Random], dict]] = {}

NCCL_PEER = ("torch.distributed.DistBackendError: NCCL error in: ProcessGroupNCCL.cpp:1970, "
             "remote process exited or there was a network error, NCCL version 2.19.3")
GLOO_PEER = ("RuntimeError: [../third_party/gloo/gloo/transport/tcp/pair.cc:598] Connection "
             "closed by peer [10.0.0.12]:23456")
NCCL_TIMEOUT = ("torch.distributed.DistBackendError: [Rank 3] Watchdog caught collective "
                "operation timeout: WorkNCCL(SeqNum=812, OpType=ALLREDUCE, Timeout(ms)=600000)")
CUDA_IMA = "RuntimeError: CUDA error: an illegal memory access was encountered"
CUDA_LAUNCH = "RuntimeError: CUDA error: unspecified launch failure"
CUDA_ECC = "RuntimeError: CUDA error: uncorrectable ECC error encountered"


def scenario(fn: Callable[[random.Random], dict]) -> Callable[[random.Random], dict]:
    SCENARIOS[fn.__name__] = fn
    return fn


def expect(status: str, category: str, severity: str, node: str | None, job: str | None,
           fault: float | None = None, max_delay_s: float | None = None, **more) -> dict:
    action = {"SEV1": "reconfigure", "SEV2": "restart", "SEV3": "reattempt", "WARN": "alert"}
    item = {"status": status, "category": category, "severity": severity,
            "action": action[severity], "node": node, "job": job}
    if fault is not None:
        item["fault_ts"] = round(T0 + fault, 3)
        item["max_delay_s"] = max_delay_s
    return {**item, **more}


def base(rng: random.Random, seconds: float, **cluster) -> tuple[Cluster, Job]:
    c = Cluster(rng, **cluster)
    return c, Job(c)


def xid_at(node: str, gpu: int, after: float, xids: list[int], then_silent: bool = False):
    """A GPU tweak: the first sample after `after` carries the Xids (and, optionally, none
    follow: the GPU fell off the bus)."""
    def tweak(n: str, g: int, t: float, sample: dict) -> None:
        if (n, g) == (node, gpu) and t >= after:
            if t < after + 1.0:
                sample["xids"] = xids
            elif then_silent:
                sample.clear()
    return tweak


# -- clean runs: nothing to report ----------------------------------------------------------

@scenario
def clean_warmup(rng):
    """A 45 s first step (compile), then normal steps, a clean exit, an idle cluster."""
    c, job = base(rng, 150)
    c.heartbeats(0, 150)
    c.gpu_samples(0, 150)
    job.start(0.5)
    step, end = job.run(1, 46.5, step_time=lambda s: 45.0 if s == 0 else 1.0)
    step, end = job.run(end, 110, first_step=step)
    job.finish(end + 0.5)
    return {"events": c.events, "incidents": []}


@scenario
def clean_checkpoint_stalls(rng):
    """Every 25th step saves a checkpoint and takes 15 s (under the 20 s hang floor)."""
    c, job = base(rng, 200)
    c.heartbeats(0, 200)
    c.gpu_samples(0, 200)
    job.start(0.5)
    step, end = job.run(1, 195, step_time=lambda s: 15.0 if s % 25 == 24 else 1.0)
    job.finish(end + 0.5)
    return {"events": c.events, "incidents": []}


@scenario
def clean_noise(rng):
    """Noise that is not a fault: single hot samples, counter resets, corrected ECC, unknown
    Xids, a GPU sampler restart, a NIC that is always down, heartbeat jitter."""
    c, job = base(rng, 120)

    def noise(node: str, gpu: int, t: float, sample: dict) -> None:
        if (node, gpu) == ("node-00", 0):
            sample["ecc_dbe"] = 5 if t < 40 else 0  # driver reload: counters restart
            sample["nvlink_errors"] = 40 if t < 40 else 1
        if (node, gpu) == ("node-01", 1) and 30 <= t < 31:
            sample["temp_c"], sample["throttle"] = 93.0, ["hw_thermal"]
        if (node, gpu) == ("node-01", 0) and int(t) % 17 == 0:
            sample["throttle"] = ["sw_power_cap"]
        if node == "node-02" and 50 <= t < 58:  # the sampler restarts: every GPU is quiet
            sample.clear()
        if node == "node-03":
            sample["ecc_sbe"] = 3 + int(t)  # corrected errors are not failures
        if (node, gpu) == ("node-03", 0) and 70 <= t < 71:
            sample["xids"] = [92]  # not in the taxonomy: ignored

    c.heartbeats(0, 120, links=lambda node, t: node != "node-03")
    c.gpu_samples(0, 120, tweak=noise)
    job.start(0.5)
    step, end = job.run(1, 100)
    job.finish(end + 0.5)
    return {"events": c.events, "incidents": []}


# -- hardware root causes -------------------------------------------------------------------

@scenario
def node_lost_gloo(rng):
    """node-02 dies; every peer reports a gloo error and exits. Exactly one node_lost; it
    resolves when the node reports again."""
    c, job = base(rng, 120)
    c.dead["node-02"] = (30.2, 80.0)
    c.heartbeats(0, 120)
    c.gpu_samples(0, 120)
    job.start(0.5)
    job.run(1, 30.2)
    job.fail(30.5, [0, 1, 2, 3, 6, 7], GLOO_PEER, spread=0.05)
    restarted = Job(c, hosts=(0, 1, 3), gen=1)
    restarted.start(45)
    restarted.run(46, 110)
    return {"events": c.events, "incidents": [
        expect("open", "node_lost", "SEV1", "node-02", "job-a", 30.2, 6.0, ranks=[4, 5]),
        expect("resolved", "node_lost", "SEV1", "node-02", "job-a"),
    ]}


@scenario
def node_lost_nccl_early(rng):
    """Peers report NCCL errors 0.1 s after node-01 dies, long before its heartbeat timeout.
    The recording is shuffled (replay orders it)."""
    c, job = base(rng, 60)
    c.dead["node-01"] = (30.05, 999)
    c.heartbeats(0, 60)
    c.gpu_samples(0, 60)
    job.start(0.5)
    job.run(1, 30.05)
    job.fail(30.15, [0, 1, 4, 5, 6, 7], NCCL_PEER)
    rng.shuffle(c.events)
    return {"events": c.events, "incidents": [
        expect("open", "node_lost", "SEV1", "node-01", "job-a", 30.05, 6.0, ranks=[2, 3]),
    ]}


@scenario
def node_lost_shared_node(rng):
    """node-01 runs ranks of two jobs: one incident that names no single job."""
    c = Cluster(rng)
    a, b = Job(c, "job-a", hosts=(0, 1), ranks_per_node=1), Job(c, "job-b", hosts=(1, 2, 3),
                                                                   ranks_per_node=1)
    c.dead["node-01"] = (30.2, 999)
    c.heartbeats(0, 60)
    c.gpu_samples(0, 60)
    for job in (a, b):
        job.start(0.5)
        job.run(1, 30.2)
    a.fail(30.6, [0], GLOO_PEER)
    b.fail(30.7, [1, 2], NCCL_PEER)
    return {"events": c.events, "incidents": [
        expect("open", "node_lost", "SEV1", "node-01", None, 30.2, 6.0),
    ]}


@scenario
def node_leaving_planned(rng):
    """node-02 is shut down on purpose: its last heartbeat says it leaves, the coordinator's
    re-plan stops every rank (node-02's go down with the node), and generation 1 runs on the
    other three. Its silence is expected: no node_lost, no failure.

    What `trainmedic node` stopped with SIGTERM looks like to the detector (docs/coordinator.md,
    "A node that leaves by itself")."""
    c, job = base(rng, 120)
    c.dead["node-02"] = (30.05, 999)
    c.heartbeats(0, 120)
    c.gpu_samples(0, 120)
    c.emit(30.1, type="node_heartbeat", node="node-02", interval=c.interval, leaving=True)
    job.start(0.5)
    job.run(1, 30.0)
    for rank in range(job.world):
        if job.node_of(rank) == "node-02":  # stopped as the node shut down: not marked as a plan's stop
            job.worker(31.0 + 0.01 * rank, rank, "worker_exit", exit_code=None, signal=15)
        else:
            job.worker(31.5 + 0.01 * rank, rank, "worker_exit", exit_code=None, signal=15, stopped=True)
    moved = Job(c, hosts=(0, 1, 3), gen=1)
    moved.start(40)
    moved.run(41, 110)
    return {"events": c.events, "incidents": []}


@scenario
def telemetry_gap_all_nodes(rng):
    """Every node goes quiet at the same moment for 20 s (the broker was down, the producers
    dropped what they could not send), then reports again and the job steps on. One
    telemetry_gap, resolved when the telemetry flows again; no node_lost, no hang."""
    c, job = base(rng, 90)
    for n in range(c.nodes):
        c.dead[f"node-0{n}"] = (30.2, 50.2)
    c.heartbeats(0, 90)
    c.gpu_samples(0, 90)
    job.start(0.5)
    job.run(1, 90)
    return {"events": c.events, "incidents": [
        expect("open", "telemetry_gap", "WARN", None, None, 30.2, 6.0),
        expect("resolved", "telemetry_gap", "WARN", None, None),
    ]}


@scenario
def gpu_lost_xid79(rng):
    """GPU 0 of node-01 falls off the bus: its rank sees a CUDA error first, the Xid 79
    arrives with the next sample, peers report NCCL errors. One gpu_lost, still open when the
    job steps again at generation 1 without node-01: only node-01's own samples could resolve it."""
    c, job = base(rng, 90)
    c.heartbeats(0, 90)
    c.gpu_samples(0, 90, tweak=xid_at("node-01", 0, 30.3, [79], then_silent=True))
    job.start(0.5)
    job.run(1, 30.3)
    job.fail(30.3, [2], CUDA_LAUNCH)
    job.fail(30.8, [0, 1, 3, 4, 5, 6, 7], NCCL_PEER)
    restarted = Job(c, hosts=(0, 2, 3), gen=1)
    restarted.start(45)
    restarted.run(46, 85)
    return {"events": c.events, "incidents": [
        expect("open", "gpu_lost", "SEV1", "node-01", "job-a", 30.3, 1.0, ranks=[2, 3]),
    ]}


@scenario
def gpu_lost_silent(rng):
    """GPU 1 of node-03 stops reporting while the host beats; its rank fails a second
    later. The silent GPU is the root cause (decided after the 5 s silence)."""
    c, job = base(rng, 60)
    c.heartbeats(0, 60)

    def vanish(node: str, gpu: int, t: float, sample: dict) -> None:
        if (node, gpu) == ("node-03", 1) and t >= 30.0:
            sample.clear()

    c.gpu_samples(0, 60, tweak=vanish)
    job.start(0.5)
    job.run(1, 30.5)
    job.fail(30.6, [7], CUDA_LAUNCH)
    job.fail(31.2, [0, 1, 2, 3, 4, 5, 6], NCCL_PEER)
    last_sample = sample_time(3, 1, 29.0)
    return {"events": c.events, "incidents": [
        expect("open", "gpu_lost", "SEV1", "node-03", "job-a", last_sample, 7.0),
    ]}


@scenario
def gpu_ecc_counter(rng):
    """ecc_dbe of node-01 GPU 1 rises; its rank reports the uncorrectable ECC error."""
    c, job = base(rng, 60)
    c.heartbeats(0, 60)

    def dbe(node: str, gpu: int, t: float, sample: dict) -> None:
        if (node, gpu) == ("node-01", 1) and t >= 30.0:
            sample["ecc_dbe"] = 1

    c.gpu_samples(0, 60, tweak=dbe)
    job.start(0.5)
    job.run(1, 30.2)
    job.fail(30.2, [3], CUDA_ECC)
    job.fail(30.7, [0, 1, 2, 4, 5, 6, 7], NCCL_PEER)
    return {"events": c.events, "incidents": [
        expect("open", "gpu_ecc", "SEV1", "node-01", "job-a", sample_time(1, 1, 30.0), 1.0),
    ]}


@scenario
def gpu_ecc_xid94(rng):
    """A contained ECC error (Xid 94) on node-00 GPU 0, the rank crashes without a message."""
    c, job = base(rng, 60)
    c.heartbeats(0, 60)
    c.gpu_samples(0, 60, tweak=xid_at("node-00", 0, 30.0, [94]))
    job.start(0.5)
    job.run(1, 30.0)
    job.fail(30.1, [0], None, exit_code=None, signal=6)
    job.fail(30.9, range(1, 8), NCCL_PEER)
    return {"events": c.events, "incidents": [
        expect("open", "gpu_ecc", "SEV1", "node-00", "job-a", sample_time(0, 0, 30.0), 1.0),
    ]}


@scenario
def nvlink_xid74(rng):
    """NVLink error (Xid 74) on node-02; every rank's collective fails."""
    c, job = base(rng, 60)
    c.heartbeats(0, 60)
    c.gpu_samples(0, 60, tweak=xid_at("node-02", 1, 30.0, [74]))
    job.start(0.5)
    job.run(1, 30.2)
    job.fail(30.4, range(8), NCCL_PEER)
    return {"events": c.events, "incidents": [
        expect("open", "nvlink", "SEV1", "node-02", "job-a", sample_time(2, 1, 30.0), 1.0),
    ]}


@scenario
def nvlink_counter(rng):
    """nvlink_errors rises on an idle node (no job): a node incident naming no job."""
    c, job = base(rng, 60)
    job.hosts = (0, 1, 2)
    c.heartbeats(0, 60)

    def rising(node: str, gpu: int, t: float, sample: dict) -> None:
        if node == "node-03" and gpu == 0 and t >= 30:
            sample["nvlink_errors"] = 12 + int(t - 29) * 50

    c.gpu_samples(0, 60, tweak=rising)
    job.start(0.5)
    job.run(1, 55)
    return {"events": c.events, "incidents": [
        expect("open", "nvlink", "SEV1", "node-03", None, sample_time(3, 0, 30.0), 1.0),
    ]}


@scenario
def gpu_driver_xid119(rng):
    """GSP timeout (Xid 119) on node-03; its ranks fail with CUDA errors, peers with NCCL."""
    c, job = base(rng, 60)
    c.heartbeats(0, 60)
    c.gpu_samples(0, 60, tweak=xid_at("node-03", 0, 30.0, [119]))
    job.start(0.5)
    job.run(1, 30.3)
    job.fail(30.35, [6, 7], CUDA_LAUNCH)
    job.fail(30.9, range(6), NCCL_PEER)
    return {"events": c.events, "incidents": [
        expect("open", "gpu_driver", "SEV1", "node-03", "job-a", sample_time(3, 0, 30.0),
               1.0),
    ]}


# -- job-level root causes ------------------------------------------------------------------

@scenario
def process_exit_oom_kill(rng):
    """Rank 5 is killed (signal 9) with no error; peers report NCCL errors and exit. One
    process_exit on rank 5's node; resolved when generation 1 steps."""
    c, job = base(rng, 80)
    c.heartbeats(0, 80)
    c.gpu_samples(0, 80)
    job.start(0.5)
    job.run(1, 30.4)
    job.worker(30.4, 5, "worker_exit", exit_code=None, signal=9)
    job.fail(30.9, [0, 1, 2, 3, 4, 6, 7], NCCL_PEER)
    restarted = Job(c, gen=1)
    restarted.start(45)
    restarted.run(46, 75)
    return {"events": c.events, "incidents": [
        expect("open", "process_exit", "SEV2", "node-02", "job-a", 30.4, 1.0, ranks=[5]),
        expect("resolved", "process_exit", "SEV2", "node-02", "job-a"),
    ]}


@scenario
def cuda_error_illegal_access(rng):
    """Rank 3 hits an illegal memory access (application Xid 13 follows): the program's
    fault, a restart, never node isolation."""
    c, job = base(rng, 60)
    c.heartbeats(0, 60)
    c.gpu_samples(0, 60, tweak=xid_at("node-01", 1, 30.3, [13]))
    job.start(0.5)
    job.run(1, 30.3)
    job.fail(30.3, [3], CUDA_IMA)
    job.fail(30.8, [0, 1, 2, 4, 5, 6, 7], NCCL_PEER)
    return {"events": c.events, "incidents": [
        expect("open", "cuda_error", "SEV2", "node-01", "job-a", 30.3, 1.0, ranks=[3]),
    ]}


@scenario
def software_error_all_ranks(rng):
    """The same Python bug raises on every rank within 40 ms: one incident."""
    c, job = base(rng, 60)
    c.heartbeats(0, 60)
    c.gpu_samples(0, 60)
    job.start(0.5)
    job.run(1, 30.3)
    job.fail(30.3, range(8), "ValueError: Expected input batch_size (32) to match target "
                             "batch_size (31).", spread=0.005)
    return {"events": c.events, "incidents": [
        expect("open", "software_error", "SEV2", "node-00", "job-a", 30.3, 1.0, ranks=[0]),
    ]}


@scenario
def nccl_error_timeout(rng):
    """Every rank's NCCL watchdog times out; no node, GPU or rank is to blame."""
    c, job = base(rng, 60)
    c.heartbeats(0, 60)
    c.gpu_samples(0, 60)
    job.start(0.5)
    job.run(1, 30.0)
    job.fail(38.0, range(8), NCCL_TIMEOUT, spread=0.02)
    return {"events": c.events, "incidents": [
        expect("open", "nccl_error", "SEV2", None, "job-a", 38.0, 2.5),
    ]}


@scenario
def hang_rank(rng):
    """Rank 5 hangs; its peers finish one more step and wait in the collective. One hang
    naming rank 5 and its node; resolved when the restarted job steps."""
    c, job = base(rng, 100)
    c.heartbeats(0, 100)
    c.gpu_samples(0, 100)
    job.start(0.5)
    step, last = job.run(1, 40.0, stop_early=(5,))
    restarted = Job(c, gen=1)
    restarted.start(75)
    restarted.run(76, 95)
    return {"events": c.events, "incidents": [
        expect("open", "hang", "SEV2", "node-02", "job-a", last, 20.0 + 1e-3, ranks=[5]),
        expect("resolved", "hang", "SEV2", "node-02", "job-a"),
    ]}


@scenario
def network_conn_refused(rng):
    """One rank's connection to the data service is refused; the job retries in place and
    keeps stepping (SEV3, resolved by progress)."""
    c, job = base(rng, 60)
    c.heartbeats(0, 60)
    c.gpu_samples(0, 60)
    job.start(0.5)
    job.run(1, 55)
    job.worker(30.3, 2, "worker_error",
               error="ConnectionRefusedError: [Errno 111] Connection refused")
    return {"events": c.events, "incidents": [
        expect("open", "network", "SEV3", None, "job-a", 30.3, 2.5),
        expect("resolved", "network", "SEV3", None, "job-a"),
    ]}


# -- links, stragglers, heat, escalation ----------------------------------------------------

@scenario
def link_flap(rng):
    """ib0 of node-01 is down for 2 s, then stays up: one SEV3, resolved after 30 s up."""
    c, job = base(rng, 80)
    c.heartbeats(0, 80, links=lambda node, t: not (node == "node-01" and 25.0 <= t < 27.0))
    c.gpu_samples(0, 80)
    job.start(0.5)
    job.run(1, 78)
    return {"events": c.events, "incidents": [
        expect("open", "link_flap", "SEV3", "node-01", "job-a", 27.0, 1.1),
        expect("resolved", "link_flap", "SEV3", "node-01", "job-a"),
    ]}


@scenario
def straggler(rng):
    """Rank 6 takes 1.8x as long as its peers for a while, then recovers."""
    c, job = base(rng, 140)
    c.heartbeats(0, 140)
    c.gpu_samples(0, 140)
    job.start(0.5)
    step, end = job.run(1, 90, rank_factor={6: 1.8})
    job.run(end, 138, first_step=step)
    return {"events": c.events, "incidents": [
        expect("open", "straggler", "WARN", "node-03", "job-a", ranks=[6]),
        expect("resolved", "straggler", "WARN", "node-03", "job-a"),
    ]}


@scenario
def thermal(rng):
    """GPU 1 of node-02 throttles for heat for 30 s, then cools."""
    c, job = base(rng, 110)
    c.heartbeats(0, 110)

    def hot(node: str, gpu: int, t: float, sample: dict) -> None:
        if (node, gpu) == ("node-02", 1) and 30 <= t < 60:
            sample["temp_c"], sample["throttle"] = 91.5, ["hw_thermal", "sw_thermal"]

    c.gpu_samples(0, 110, tweak=hot)
    job.start(0.5)
    job.run(1, 105)
    return {"events": c.events, "incidents": [
        expect("open", "thermal", "WARN", "node-02", "job-a"),
        expect("resolved", "thermal", "WARN", "node-02", "job-a"),
    ]}


@scenario
def escalation_link_flaps(rng):
    """Three flaps of node-01's ib0 within two minutes (one switch reboot): one episode, each
    flap SEV3, none escalated (separate episodes would be: tests/unit/streams/test_escalation)."""
    c, job = base(rng, 200)
    downs = [(20.0, 21.0), (80.0, 81.5), (140.0, 141.0)]
    c.heartbeats(0, 200, links=lambda node, t: not (
        node == "node-01" and any(a <= t < b for a, b in downs)))
    c.gpu_samples(0, 200)
    job.start(0.5)
    job.run(1, 195, step_time=2.0)
    out = []
    for _ in range(3):
        out += [expect("open", "link_flap", "SEV3", "node-01", "job-a"),
                expect("resolved", "link_flap", "SEV3", "node-01", "job-a")]
    return {"events": c.events, "incidents": out}


@scenario
def escalation_sev2_same_node(rng):
    """Two CUDA errors on node-01 within 30 minutes: the second isolates the node (SEV1)."""
    c, job = base(rng, 150)
    c.heartbeats(0, 150)
    c.gpu_samples(0, 150)
    job.start(0.5)
    job.run(1, 30.3)
    job.fail(30.3, [3], CUDA_IMA)
    job.fail(30.8, [0, 1, 2, 4, 5, 6, 7], NCCL_PEER)
    second = Job(c, gen=1)
    second.start(40)
    second.run(41, 90.3)
    second.fail(90.3, [2], CUDA_LAUNCH)
    second.fail(90.8, [0, 1, 3, 4, 5, 6, 7], NCCL_PEER)
    third = Job(c, hosts=(0, 2, 3), gen=2)
    third.start(105)
    third.run(106, 145)
    return {"events": c.events, "incidents": [
        expect("open", "cuda_error", "SEV2", "node-01", "job-a", 30.3, 1.0),
        expect("resolved", "cuda_error", "SEV2", "node-01", "job-a"),
        expect("open", "cuda_error", "SEV1", "node-01", "job-a", 90.3, 1.0),
        expect("resolved", "cuda_error", "SEV1", "node-01", "job-a"),
    ]}


@scenario
def escalation_same_bug(rng):
    """The training script raises the same ValueError at every generation, on rank 0 of
    node-00: the job's failure, SEV2 each time, never a node's SEV1 (the coordinator backs off
    and gives up on the job)."""
    c, job = base(rng, 75)
    c.heartbeats(0, 75)
    c.gpu_samples(0, 75)
    out = []
    for gen, t in enumerate((0.5, 25.5, 50.5)):
        run = Job(c, gen=gen)
        run.start(t)
        run.run(t + 0.5, t + 15.3)
        run.fail(t + 15.3, [0], f"ValueError: bad label -{gen + 1} in batch {17 * gen + 5}")
        run.fail(t + 15.8, range(1, 8), GLOO_PEER)
        out += [expect("open", "software_error", "SEV2", "node-00", "job-a", t + 15.3, 1.0,
                       ranks=[0])]
        if gen < 2:  # the next generation's first steps resolve it
            out += [expect("resolved", "software_error", "SEV2", "node-00", "job-a")]
    return {"events": c.events, "incidents": out}


# -- bad input ------------------------------------------------------------------------------

BAD_LINES = [
    "this is not json",
    '{"type": "gpu_sample", "node": "node-00", "gpu": 0}',
    '{"type": "node_heartbeat", "ts": 1700000010.0, "node": "node-00", "interval": -1}',
    '{"type": "teleport", "ts": 1700000010.0, "node": "node-00"}',
    '{"type": "worker_step", "ts": -5, "node": "node-00", "job": "j", "rank": 0, '
    '"world_size": 1, "step": 1, "step_time": 1.0}',
    "[1, 2, 3]",
]


@scenario
def malformed_lines(rng):
    """A clean recording with six invalid lines: each reported, skipped, no incident."""
    c, job = base(rng, 50)
    c.heartbeats(0, 50)
    c.gpu_samples(0, 50)
    job.start(0.5)
    step, end = job.run(1, 45)
    job.finish(end + 0.5)
    return {"events": c.events, "incidents": [], "bad_lines": BAD_LINES}


def write(name: str, made: dict) -> None:
    lines = [json.dumps(event, separators=(",", ":")) for event in made["events"]]
    bad_at = []
    for n, bad in enumerate(made.get("bad_lines", ())):
        at = (n + 1) * len(lines) // (len(made["bad_lines"]) + 1) + n
        lines.insert(at, bad)
        bad_at.append(at + 1)
    (HERE / f"{name}.jsonl").write_text("\n".join(lines) + "\n")
    expected = {"description": SCENARIOS[name].__doc__.split("\n\n")[0].strip(),
                "incidents": made["incidents"]}
    if bad_at:
        expected["bad_lines"] = bad_at
    (HERE / f"{name}.expected.json").write_text(json.dumps(expected, indent=1) + "\n")


def main(names: list[str]) -> None:
    for name in names or SCENARIOS:
        write(name, SCENARIOS[name](random.Random(name)))
        print(name)


if __name__ == "__main__":
    main(sys.argv[1:])
