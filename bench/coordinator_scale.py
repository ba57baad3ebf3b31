"""Coordinator decisions at the simulator's scale: 12,500 nodes, 50 jobs, through the real path.

12,500 nodes on leaves of 32 and 50 running jobs (2 x 2,048, 8 x 512, 20 x 128 and 20 x 32
nodes, 8 ranks per node, each with a throughput table of at most 16 sizes between 75% and
100% of its size), the rest spare. Timed, each on the state the previous left:
  (a) a SEV1 node fault: `react` on the incident, then `settle(tick)` once its group window
      has passed (isolation, one planner call, the plans and their commands folded);
  (b) the capacity re-plan once that node is re-admitted (`react`, then `settle(tick)`);
  (c) a SEV2 restart of a 2,048-node job: `react` on the incident (2,048 commands);
  (d) its 2,048 nodes acknowledging: `react` on an accepted and a done ack for each command,
      the last one completing the plan.
(a) and (b) run for a job of each size in turn. Between measurements every plan in flight is
acknowledged and completed (not timed), so each starts from a quiet cluster. The planner is
imported first, so no measurement pays for loading numpy.
The state built is frozen out of the garbage collector (`gc.freeze`), as a long simulation
should do: otherwise a full collection over it costs ~300 ms wherever it falls.
Run: .venv/bin/python bench/coordinator_scale.py [--runs 5]
"""

from __future__ import annotations

import argparse
import gc
import statistics
import time

from harness.coordinator_cluster import initial_state, job_spec, node_names

import trainmedic.recovery.planner.plan  # noqa: F401  (numpy loads here, not in a measurement)
from trainmedic.recovery.coordinator.core import ClusterState, apply, react, settle, tick
from trainmedic.recovery.coordinator.core.decide import completion
from trainmedic.schemas import CommandAcked, Incident, JobSubmitted
from trainmedic.schemas.nodes import NodeReadmitted

NODES, LEAF = 12_500, 32
JOB_SIZES = (2048,) * 2 + (512,) * 8 + (128,) * 20 + (32,) * 20
TABLE_SIZES = 16
# CPU time of this process, not wall time: on a shared machine the wall clock also counts the others.
clock = time.process_time


def table(size: int) -> tuple[int, ...]:
    """At most TABLE_SIZES sizes from 75% to 100% of `size`: where a job's throughput is known."""
    low = size * 3 // 4
    step = max(1, (size - low) // (TABLE_SIZES - 1))
    return (*range(low, size, step), size)


def cluster() -> ClusterState:
    """Every job submitted, started and running (built by `apply`, so building stays fast)."""
    names = node_names(NODES)
    state = initial_state(names, LEAF)
    first = 0
    for j, size in enumerate(JOB_SIZES):
        react(state, JobSubmitted(ts=1.0, job=job_spec(j, names[first:first + size], table(size))), 1.0)
        first += size
    finish(state, 2.0)
    return state


def finish(state: ClusterState, now: float) -> None:
    """Acknowledge every command of every plan in flight, and fold each plan's completion."""
    for job in state.jobs.values():
        if not job.state.in_flight:
            continue
        for cid, step in job.steps.items():
            apply(state, CommandAcked(ts=now, node=step.node, command_id=cid, job=job.spec.id,
                                      generation=job.generation, status="done"))
        settle(state, completion(state, job, now), now)


def acks(commands: list, now: float) -> list[CommandAcked]:
    """An accepted and a done ack for each command, accepted ones first."""
    return [CommandAcked(ts=now, node=c.node, command_id=c.id, job=c.job, generation=c.generation, status=s)
            for s in ("accepted", "done") for c in commands]


def report(label: str, times: list[float], extra: str = "") -> None:
    times = sorted(times)
    p95 = times[min(len(times) - 1, round(0.95 * (len(times) - 1)))]
    print(f"  {label:46} median {1000 * statistics.median(times):7.1f} ms   p95 {1000 * p95:7.1f} ms"
          f"   ({len(times)} runs){extra}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=5, help="runs of each measurement per job size")
    runs = parser.parse_args().runs
    start = clock()
    state = cluster()
    print(f"{len(state.nodes)} nodes, {len(state.jobs)} jobs ({sum(JOB_SIZES)} nodes busy); "
          f"built in {clock() - start:.1f} s")
    # The built state is a quarter of a million objects: a full collection over them (~300 ms here)
    # would land in whichever measurement allocates past the threshold. A long run freezes it once.
    gc.freeze()
    window = state.config.group_window_s
    sizes = sorted(set(JOB_SIZES))
    sev1: dict[int, list[float]] = {size: [] for size in sizes}
    commands_out: dict[int, int] = {}
    replan, restart, acked = [], [], []
    now = 100.0
    for run in range(runs):
        for size in sizes:  # a node fault in a job of each size, a different job each run
            alike = [job for job in state.jobs.values() if len(job.spec.nodes) == size]
            job = alike[run % len(alike)]
            node = job.nodes[len(job.nodes) // 2]
            fault = Incident(ts=now, id=f"sev1-{run}-{size}", status="open", category="gpu_lost",
                             severity="SEV1", action="reconfigure", job=job.spec.id, node=node, first_ts=now)
            begin = clock()
            out = react(state, fault, now) + settle(state, tick(state, now + window), now + window)
            sev1[size].append(clock() - begin)
            commands_out[size] = sum(e.type == "command" for e in out)
            now += 10.0
            finish(state, now)

            back = NodeReadmitted(ts=now, node=node, incident_id=fault.id, reason="bench: repaired")
            begin = clock()
            react(state, back, now)
            settle(state, tick(state, now), now)
            replan.append(clock() - begin)
            now += 10.0
            finish(state, now)

        big = state.jobs[f"job-{run % 2:02d}"]
        sev2 = Incident(ts=now, id=f"sev2-{run}", status="open", category="process_exit", severity="SEV2",
                        action="restart", job=big.spec.id, node=big.nodes[7], first_ts=now)
        begin = clock()
        commands = [e for e in react(state, sev2, now) if e.type == "command"]
        restart.append(clock() - begin)
        answers = acks(commands, now + 1.0)
        begin = clock()
        outcome = [e for ack in answers for e in react(state, ack, now + 1.0)]
        acked.append(clock() - begin)
        assert [e.type for e in outcome] == ["recovery_completed"], outcome
        now += 3600.0  # past the restart backoff, so the next SEV2 restarts at once
    for size in sizes:
        report(f"(a) SEV1 in a {size}-node job ({commands_out[size]} commands)", sev1[size])
    report("(a) SEV1, every job size", [t for times in sev1.values() for t in times])
    report("(b) capacity re-plan after re-admission", replan)
    report(f"(c) SEV2 restart of a {len(commands)}-node job", restart)
    report(f"(d) its {len(answers)} acks folded and decided", acked)
    report("(c) + (d)", [c + d for c, d in zip(restart, acked, strict=True)])


if __name__ == "__main__":
    main()
