"""Whom a failure blames: the node (isolate it) or the job (restart it, back off, give up). What a job
reports never isolates a node: failures of two jobs the coordinator ran on one node make it suspect, and
its health check decides (health.py; docs/coordinator.md, "Blast-radius limits and blame").
"""

from __future__ import annotations

from trainmedic.recovery.coordinator.core.state import ClusterState, Job, Node
from trainmedic.schemas.incident import Incident, Severity

# Categories whose evidence is the program's behaviour, not the hardware's: a SEV1 in one of
# them was escalated by repetition (the detector's "SEV2 twice on a node"), and repetition on
# one job's node is what a deterministic bug looks like too.
FOLLOWS_THE_JOB = frozenset({"process_exit", "cuda_error", "hang", "nccl_error", "software_error",
                             "link_flap", "network"})

# The coordinator's own incidents about a node's health (health.py): a node made suspect by two jobs'
# failures (WARN, an alert: it takes no new work while its health check is out), the check's failure
# or silence by its deadline (SEV1: the node's own evidence, isolated within the cap), and a check the
# node only refused until its deadline (WARN, an alert: a refusal is no evidence about the node).
NODE_SUSPECT = "node_suspect"
HEALTH_CHECK_FAILED = "health_check_failed"
HEALTH_CHECK_REFUSED = "health_check_refused"

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
    """A SEV1 that names a node isolates it only on the node's own evidence: a hardware category, a
    failed command or health check of the node, a node's own repeated link flaps (no job's report).
    What jobs report never does: failures of two jobs there make the node suspect (`other_failures`,
    health.py), and its own answer to a health check decides."""
    if incident.node is None or incident.severity is not Severity.SEV1 or not state.in_cluster(incident.node):
        return False
    return incident.category not in FOLLOWS_THE_JOB or incident.job is None


def other_failures(state: ClusterState, incident: Incident) -> list[Incident]:
    """The other jobs' failures on the node of `incident`, a SEV1 of a job's category, when there are
    any (else none): failures of different jobs that the coordinator ran on the node (a job it does
    not know, or one that never ran there, counts for none), all received after the node's last passed
    health check (`Node.vouched_ts`). Two jobs failing on one node make it suspect (health.py)."""
    node = state.nodes.get(incident.node) if incident.node is not None else None
    if (node is None or incident.severity is not Severity.SEV1 or incident.category not in FOLLOWS_THE_JOB
            or incident.job is None or not state.in_cluster(node.id)):
        return []
    if not ran_on(state.jobs.get(incident.job), node.id) or not _after_vouch(state, node, incident):
        return []
    return [other for other in state.incidents.values()
            if other.node == node.id and other.job not in (None, incident.job)
            and other.severity in (Severity.SEV1, Severity.SEV2) and other.category in FOLLOWS_THE_JOB
            and ran_on(state.jobs.get(other.job), node.id) and _after_vouch(state, node, other)]


def _after_vouch(state: ClusterState, node: Node, incident: Incident) -> bool:
    return node.vouched_ts is None or state.received(incident) > node.vouched_ts


def ran_on(job: Job | None, node: str) -> bool:
    """The coordinator ran (or placed) this job on `node`: its spec, its nodes or its plan's name it."""
    if job is None:
        return False
    plan = job.plan
    return (node in job.nodes or node in job.spec.nodes
            or (plan is not None and (node in plan.nodes or node in plan.previous)))
