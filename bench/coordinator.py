"""Coordinator timings on a synthetic cluster: a SEV1 decision, a rebuild fold, a tick.

NODES nodes on leaves of 32, JOBS jobs of equal size (8 ranks per node) with a few spares;
one SEV1 incident on a node of the first job, decided when its group window has passed (react,
then the tick that decides it). Run: .venv/bin/python bench/coordinator.py
"""

from __future__ import annotations

import argparse
import time

from harness.coordinator_cluster import initial_state, job_spec, node_names

from trainmedic.recovery.coordinator.core import ClusterState, apply, react, settle, tick
from trainmedic.schemas import CommandAcked, Incident, JobSubmitted

JOBS, LEAF, SPARES = 32, 32, 32
MIN_JOB_NODES = 8


def cluster(nodes: int) -> tuple[ClusterState, list]:
    """A state with every job started and running, and the log that built it."""
    names = node_names(nodes)
    state, log = initial_state(names, LEAF), []
    size = (nodes - SPARES) // JOBS
    sizes = (*range(size // 2, size + 1, max(1, size // 16)), size)
    for j in range(JOBS):
        event = JobSubmitted(ts=1.0, job=job_spec(j, names[j * size:(j + 1) * size], sizes))
        log += [event, *react(state, event, 1.0)]
    for command in [e for e in log if e.type == "command"]:
        ack = CommandAcked(ts=2.0, node=command.node, command_id=command.id, job=command.job,
                           generation=0, status="done")
        log += [ack, *react(state, ack, 2.0)]
    return state, log


def timed(label: str, fn):
    start = time.perf_counter()
    result = fn()
    print(f"  {label:44} {1000 * (time.perf_counter() - start):9.1f} ms")
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--nodes", type=int, nargs="+", default=[2048, 16384])
    sizes = parser.parse_args().nodes
    smallest = SPARES + MIN_JOB_NODES * JOBS
    if min(sizes) < smallest:
        parser.error(f"--nodes must be at least {smallest}: {JOBS} jobs of at least {MIN_JOB_NODES} nodes "
                     f"(the SEV1s hit the first job's 4th and 5th node) and {SPARES} spares")
    for nodes in sizes:
        print(f"{nodes} nodes, {JOBS} jobs")
        state, log = timed("build: submit, start and ack every job", lambda n=nodes: cluster(n))
        for i, node in enumerate(("n00003", "n00004")):  # the first call also imports numpy
            sev1 = Incident(ts=100.0 + 10 * i, id=f"inc-{i}", status="open", category="gpu_lost",
                            severity="SEV1", action="reconfigure", job="job-00", node=node,
                            first_ts=99.0 + 10 * i)
            due = sev1.ts + state.config.group_window_s  # node SEV1s wait for their group

            def decide(s=state, e=sev1, t=due):
                return react(s, e, e.ts) + settle(s, tick(s, t), t)

            out = timed(f"SEV1 #{i + 1}: isolate, plan, commands", decide)
            print(f"    {sum(e.type == 'command' for e in out)} commands, "
                  f"{sum(e.type == 'recovery_planned' for e in out)} jobs re-planned")
            log += [sev1, *out]
        timed("tick with that plan in flight", lambda s=state: tick(s, 113.0))

        def rebuild(events=log, config=state.config):
            fresh = ClusterState.initial(config)
            for event in events:
                apply(fresh, event)
            return fresh

        fresh = timed(f"rebuild: fold {len(log)} events", rebuild)
        print(f"    rebuilt state equals the live one: {fresh == state}")


if __name__ == "__main__":
    main()
