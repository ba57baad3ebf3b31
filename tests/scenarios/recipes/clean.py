"""Recordings with nothing to report: clean runs, noise that is not a fault, invalid lines."""

from __future__ import annotations

from recipes.kit import recording, running, scenario


@scenario
def clean_warmup(rng):
    """A 45 s first step (compile), then normal steps, a clean exit, an idle cluster."""
    c, job = running(rng, 150)
    step, end = job.run(1, 46.5, step_time=lambda s: 45.0 if s == 0 else 1.0)
    step, end = job.run(end, 110, first_step=step)
    job.finish(end + 0.5)
    return recording(c)


@scenario
def clean_checkpoint_stalls(rng):
    """Every 25th step saves a checkpoint and takes 15 s (under the 20 s hang floor)."""
    c, job = running(rng, 200)
    step, end = job.run(1, 195, step_time=lambda s: 15.0 if s % 25 == 24 else 1.0)
    job.finish(end + 0.5)
    return recording(c)


@scenario
def clean_noise(rng):
    """Noise that is not a fault: single hot samples, counter resets, corrected ECC, unknown
    Xids, a GPU sampler restart, a NIC that is always down, heartbeat jitter."""

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

    c, job = running(rng, 120, links=lambda node, t: node != "node-03", tweak=noise)
    step, end = job.run(1, 100)
    job.finish(end + 0.5)
    return recording(c)


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
    c, job = running(rng, 50)
    step, end = job.run(1, 45)
    job.finish(end + 0.5)
    return recording(c, bad_lines=BAD_LINES)
