"""Recordings of a forger's flood of job reports: the rate limits and the `storm` they raise."""

from __future__ import annotations

from sim import Job

from recipes.kit import expect, recording, running, scenario, xid_at

INVENTED = 80  # more jobs than node-02 follows (limits.node_jobs, 64)


@scenario
def storm_invented_jobs(rng):
    """Someone with an executor's credentials starts 80 invented jobs on node-02, each with a hang floor of
    1 s, steps them a little and lets them hang (issue 45's red-team run: 200 SEV1 hangs and 401 alert
    posts in 45 s). Ten hangs open (limits.node_incidents), then one `storm` (SEV2, action alert) for
    node-02; the other hangs are suppressed and the starts past 64 jobs not followed. A real Xid 79 on
    node-02 during the storm still opens its gpu_lost: node evidence is never limited. The storm resolves
    when its 60 s window is over, and releases what it held that is still open through the limits again:
    ten hangs open then (SEV2, escalating nothing), and the next storm holds the rest."""
    c, job = running(rng, 100, tweak=xid_at("node-02", 1, 40.0, [79]))
    job.run(1, 99)
    for n in range(INVENTED):
        t = 10.0 + 0.2 * n
        forged = Job(c, name=f"invented-{n:03d}", hosts=(2,), ranks_per_node=1)
        forged.worker(t, 0, "worker_start", hang_floor_s=1.0)
        forged.run(t + 0.05, t + 0.9, step_time=0.1)
    hangs = [expect("open", "hang", "SEV2", "node-02", "invented-000")]
    hangs += [expect("open", "hang", "SEV1", "node-02", f"invented-{n:03d}") for n in range(1, 10)]
    storm = expect("open", "storm", "SEV2", "node-02", None, action="alert")
    lost = expect("open", "gpu_lost", "SEV1", "node-02", None, 40.0, 1.2)
    released = [expect("open", "hang", "SEV2", "node-02", f"invented-{n:03d}")
                for n in range(10, 20)]
    return recording(c, *hangs, storm, lost, {**storm, "status": "resolved"}, *released, storm)
