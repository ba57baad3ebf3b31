"""From a plan to the commands it calls for: deterministic ids, steps, worker specs, all functions of
the plan and the job spec, so a restarted coordinator derives the same commands (and ids) from it.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping

from trainmedic.recovery.coordinator.core.rendezvous import rendezvous
from trainmedic.recovery.coordinator.core.state import ClusterState, Step
from trainmedic.schemas.commands import Command, CommandAction, RestoreSource, WorkerSpec
from trainmedic.schemas.jobs import JobSpec
from trainmedic.schemas.recovery import RecoveryKind, RecoveryPlanned


def digest(*parts: object) -> str:
    return hashlib.sha256("\x1f".join(str(p) for p in parts).encode()).hexdigest()[:20]


def start_plan_id(job: str) -> str:
    return f"plan-{digest('start', job)}"


def incident_plan_id(incident_id: str) -> str:
    """One plan per incident, however often the incident is delivered."""
    return f"plan-{digest('incident', incident_id)}"


def stop_plan_id(job: str) -> str:
    """One stop per job, however often the operator asks."""
    return f"plan-{digest('stop', job)}"


def command_id(plan_id: str, job: str, node: str, generation: int, action: CommandAction) -> str:
    return f"cmd-{digest(plan_id, job, node, generation, action)}"


def escalation_id(command: str) -> str:
    """The incident a failed command escalates to: one per command."""
    return f"esc-{digest('escalate', command)}"


def plan_steps(plan: RecoveryPlanned) -> dict[str, Step]:
    """Command id -> step. A reattempt retries every node in place; otherwise nodes that leave
    are stopped, nodes that stay are restarted and nodes that join are started."""
    if plan.kind is RecoveryKind.REATTEMPT:
        steps = [Step(node, CommandAction.REATTEMPT) for node in plan.nodes]
    else:
        before, after = set(plan.previous), set(plan.nodes)
        steps = [Step(node, CommandAction.STOP) for node in plan.previous if node not in after]
        steps += [Step(node, CommandAction.RESTART if node in before else CommandAction.START)
                  for node in plan.nodes]
    return {command_id(plan.plan_id, plan.job, s.node, plan.generation, s.action): s for s in steps}


def replica(source: str | None = None) -> RestoreSource:
    """State from the snapshots on the job's nodes, `source`'s first on a tie (None: any node's).
    Every rank offers its own node's newest of this submission (docs/executor.md, "Restore design")."""
    return RestoreSource(kind="replica", node=source)


def checkpoint() -> RestoreSource:
    """This submission's newest checkpoint, else the point it resumed from: a later generation always
    restores (every rank joins the restore's collectives, whatever it holds), fresh when nothing is
    found."""
    return RestoreSource(kind="checkpoint")


def first_start(spec: JobSpec) -> RestoreSource:
    """What a submission's first generation restores: the checkpoint it asked to resume from, else
    nothing, whatever earlier submissions of the job id left."""
    return RestoreSource(kind="checkpoint" if spec.resume is not None else "none")


def planned_restore(nodes: tuple[str, ...], sources: Mapping[str, RestoreSource]) -> dict[str, RestoreSource]:
    """What each node of a re-plan restores from, as the planner chose (`PlanResult.restore`): a
    replica on the node it named, or the job's checkpoint."""
    return {node: replica(source.node) if source.kind == "replica" else checkpoint()
            for node in nodes if (source := sources.get(node)) is not None}


def _own_state(previous: tuple[str, ...], node: str) -> RestoreSource:
    """A node the plan names no source for keeps its own state (its snapshots first on a tie); a
    node new to the job takes any node's."""
    return replica(node if node in previous else None)


def commands_for(state: ClusterState, plan: RecoveryPlanned, now: float,
                 only: set[str] | None = None) -> list[Command]:
    """The plan's commands (those in `only`, when given), stamped `now`."""
    job = state.jobs[plan.job]
    spec = job.spec
    index = {node: i for i, node in enumerate(plan.nodes)}
    rpn = spec.ranks_per_node
    # Every node's worker is the job's, but for its ranks and restore source: validated once, then
    # copied with those two, which are valid by construction (2,048 validations were most of a
    # 2,048-node restart).
    key, port = rendezvous(state.rendezvous_root, plan.job, job.submission, plan.generation, spec.master_port)
    job_worker = WorkerSpec(
        ranks=(), world_size=len(plan.nodes) * rpn, master_addr=state.node(plan.nodes[0]).address,
        master_port=port, command=spec.argv, checkpoint_dir=spec.checkpoint_dir,
        resume=spec.resume, submission=job.submission or None, env=dict(spec.env), workdir=spec.workdir,
        failure=spec.failure, rendezvous_key=key,
    ) if plan.nodes else None
    commands = []
    for cid, step in plan_steps(plan).items():
        if only is not None and cid not in only:
            continue
        worker = None
        if step.action is not CommandAction.STOP:
            i = index[step.node]
            restore = plan.restore.get(step.node) or _own_state(plan.previous, step.node)
            worker = job_worker.model_copy(update={"ranks": tuple(range(i * rpn, (i + 1) * rpn)),
                                                   "restore": restore})
        commands.append(Command(
            ts=now, node=step.node, id=cid, plan_id=plan.plan_id, incident_id=plan.incident_id,
            job=plan.job, generation=plan.generation, action=step.action, worker=worker,
        ))
    return commands
