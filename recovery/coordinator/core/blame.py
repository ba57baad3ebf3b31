"""Whom a failure blames: the node (isolate it) or the job (restart it, back off, give up); only failures
of jobs the coordinator ran on a node count against it (docs/coordinator.md, "Blast-radius limits and blame").
"""

from __future__ import annotations

from trainmedic.recovery.coordinator.core.state import ClusterState, Job
from trainmedic.schemas.incident import Incident, Severity

# Categories whose evidence is the program's behaviour, not the hardware's: a SEV1 in one of
# them was escalated by repetition (the detector's "SEV2 twice on a node"), and repetition on
# one job's node is what a deterministic bug looks like too.
FOLLOWS_THE_JOB = frozenset({"process_exit", "cuda_error", "hang", "nccl_error", "software_error",
                             "link_flap", "network"})

# An executor's OSError when it launches a rank, as `str(err)`: the command itself cannot run
# (a typo, a missing file, a script without its execute bit). Any node would say the same.
CANNOT_RUN = ("[Errno 2]", "No such file or directory", "[Errno 13]", "Permission denied",
              "[Errno 8]", "Exec format error", "[Errno 20]", "Not a directory")


# Failure signatures: what makes two failures "the same" for backoff. A command that cannot
# start fails its start and then its restarts: one signature.
SIGNATURES = {"start_failed": "launch_failed", "restart_failed": "launch_failed"}


def signature(incident: Incident | None) -> str | None:
    """What a failure looks like, for counting repeats; None for an incident not known."""
    return None if incident is None else SIGNATURES.get(incident.category, incident.category)


def cannot_run(reason: str | None) -> bool:
    """An ack's reason says the job's command cannot be run at all."""
    return reason is not None and any(text in reason for text in CANNOT_RUN)


def blames_node(state: ClusterState, incident: Incident) -> bool:
    """A SEV1 that names a node isolates it unless its failure follows the job: a software
    category counts against the node only when two different jobs that the coordinator ran on
    the node failed there (a job it does not know, or one that never ran there, counts for none)."""
    if incident.node is None or incident.severity is not Severity.SEV1 or not state.in_cluster(incident.node):
        return False
    if incident.category not in FOLLOWS_THE_JOB or incident.job is None:
        return True  # hardware evidence, or a node's own repeated link flaps (no job's report)
    if not ran_on(state.jobs.get(incident.job), incident.node):
        return False
    return any(other.node == incident.node and other.job not in (None, incident.job)
               and other.severity in (Severity.SEV1, Severity.SEV2) and other.category in FOLLOWS_THE_JOB
               and ran_on(state.jobs.get(other.job), incident.node)
               for other in state.incidents.values())


def ran_on(job: Job | None, node: str) -> bool:
    """The coordinator ran (or placed) this job on `node`: its spec, its nodes or its plan's name it."""
    if job is None:
        return False
    plan = job.plan
    return (node in job.nodes or node in job.spec.nodes
            or (plan is not None and (node in plan.nodes or node in plan.previous)))
