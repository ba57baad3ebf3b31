"""Recordings of a job that slows but goes on: a link that flaps, a straggling rank, a hot GPU."""

from __future__ import annotations

from recipes.kit import expect, gpu_fault, recording, running, scenario


@scenario
def link_flap(rng):
    """ib0 of node-01 is down for 2 s, then stays up: one SEV3, resolved after 30 s up."""
    c, job = running(rng, 80, links=lambda node, t: not (node == "node-01" and 25.0 <= t < 27.0))
    job.run(1, 78)
    return recording(c, expect("open", "link_flap", "SEV3", "node-01", "job-a", 27.0, 1.1),
                     expect("resolved", "link_flap", "SEV3", "node-01", "job-a"))


@scenario
def straggler(rng):
    """Rank 6 takes 1.8x as long as its peers for a while, then recovers."""
    c, job = running(rng, 140)
    step, end = job.run(1, 90, rank_factor={6: 1.8})
    job.run(end, 138, first_step=step)
    return recording(c, expect("open", "straggler", "WARN", "node-03", "job-a", ranks=[6]),
                     expect("resolved", "straggler", "WARN", "node-03", "job-a"))


@scenario
def thermal(rng):
    """GPU 1 of node-02 throttles for heat for 30 s, then cools."""
    hot = gpu_fault("node-02", 1, 30, 60, temp_c=91.5, throttle=["hw_thermal", "sw_thermal"])
    c, job = running(rng, 110, tweak=hot)
    job.run(1, 105)
    return recording(c, expect("open", "thermal", "WARN", "node-02", "job-a"),
                     expect("resolved", "thermal", "WARN", "node-02", "job-a"))
