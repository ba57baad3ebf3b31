"""When a job is over at its generation, as far as the detector can tell: no rank of it can still run
(each exited or was stopped, or sits on a node declared lost) and its failure evidence is decided. The
job is then forgotten on its nodes, so a fault there later (a link flap as a partitioned node returns)
is not blamed on it, and its later reports of that generation are refused: a node back from a partition
delivers what its executor held, and that must not place the job on it again (issue 44).

What ends a job on Kafka is the coordinator's `job_ended` (recovery topic) and each node's
`ranks_finished` (acks topic); the detector reads neither, only telemetry, where each rank's
`worker_exit` (telemetry.worker) says its process ended.
"""

from __future__ import annotations

from trainmedic.streams.core.state import DetectorState, JobWatch

ENDED_JOBS = 1024  # jobs remembered as ended, the oldest forgotten first


def over(state: DetectorState, job: JobWatch, lost: bool = True) -> bool:
    """No rank of the job's generation can still run (each exited or, with `lost`, sits on a node
    declared lost), and no failure evidence of it waits. Without `lost` it tells whether a fault of a
    node can be the job's (`correlation.affected`): a node just declared lost is the fault itself."""
    if job.group is not None:
        return False
    nodes = state.nodes
    return all(rank.exited or (lost and (node := nodes.get(rank.node)) is not None
                               and node.lost_since is not None)
               for rank in job.ranks.values())


def note_ended(state: DetectorState, name: str, generation: int) -> None:
    """Remember that the job ended at `generation` (at most ENDED_JOBS jobs)."""
    ended = state.ended
    ended.pop(name, None)
    ended[name] = generation
    while len(ended) > ENDED_JOBS:
        del ended[next(iter(ended))]


def refused(state: DetectorState, name: str, generation: int, start: bool) -> bool:
    """A report of a generation the job ended at, or an older one, is refused; a `worker_start` is not:
    it may begin the job anew (the id submitted again starts at generation 0)."""
    ended = state.ended.get(name)
    return ended is not None and generation <= ended and not start
