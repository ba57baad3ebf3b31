"""A small cluster and a recorder that drives the coordinator core the way the adapter does."""

from __future__ import annotations

from trainmedic.recovery.coordinator.core import (
    ClusterState,
    CoordinatorConfig,
    NodeConfig,
    react,
    settle,
    tick,
)
from trainmedic.recovery.coordinator.routing import route
from trainmedic.schemas import (
    CommandAcked,
    Incident,
    JobSpec,
    JobStopRequested,
    JobSubmitted,
    NodeJoined,
    NodeLeaving,
    RanksFinished,
)

# Two leaves of three nodes; n1-n3 run the job, n4-n6 are spares. The blast-radius limits are
# opened wide (every SEV1 decided at once, every node may go): these tests are about other
# things; test_limits.py and test_blame.py test the limits with their defaults.
CONFIG = CoordinatorConfig(
    ack_timeout_s=10, done_timeout_s=100, max_retries=2, mtbf_prior_s=3600,
    group_window_s=0, isolation_cap=1.0, max_restarts=100, restart_backoff_s=(0,),
    nodes=tuple(NodeConfig(id=f"n{i}", switch="leaf-1" if i <= 3 else "leaf-2") for i in range(1, 7)),
)


# The same cluster with the blast-radius limits at their defaults: at most max(1, 10 % of 6) = 1
# isolation per 10 min, restarts backing off 30 s, 2 min, 10 min, 4 at most; but SEV1s grouped over
# 2 s (the default before issue 47, 1.5 s now), which the tests of grouping count with.
LIMITED = CoordinatorConfig(ack_timeout_s=10, done_timeout_s=100, max_retries=2, mtbf_prior_s=3600,
                            group_window_s=2.0, nodes=CONFIG.nodes)


def submitted(job: str = "llm", nodes=("n1", "n2", "n3"), ts: float = 0.0, **spec) -> JobSubmitted:
    spec = {"throughput": {2: 2.0e15, 3: 3.0e15}, "ranks_per_node": 2, "command": ("python", "train.py"),
            "checkpoint_dir": "/ckpt/llm", "master_port": 29600, **spec}
    return JobSubmitted(ts=ts, job=JobSpec(id=job, nodes=nodes, **spec))


def incident(id: str, severity: str, *, node: str | None = None, job: str | None = "llm",
             ranks=(), ts: float = 50.0, status: str = "open", category: str = "test") -> Incident:
    action = {"SEV1": "reconfigure", "SEV2": "restart", "SEV3": "reattempt", "WARN": "alert"}[severity]
    return Incident(ts=ts, id=id, status=status, category=category, severity=severity, action=action,
                    job=job, node=node, ranks=ranks, first_ts=ts - 1)


def of_type(events: list, kind: str) -> list:
    return [e for e in events if e.type == kind]


def fed(event) -> tuple[str, str]:
    """(topic suffix, key) of an event others write for the coordinator: jobs and stops, the
    detector's incidents, node reports (acks, ranks finished, a node's own join and leave),
    operators' node events."""
    match event:
        case JobSubmitted():
            return "jobs", event.job.id
        case JobStopRequested():
            return "jobs", event.job
        case Incident():
            return "incidents", event.job or event.node or event.id
        case CommandAcked() | RanksFinished() | NodeJoined() | NodeLeaving():
            return "acks", event.node
    return "nodes", event.node


class Recorder:
    """Feeds events and ticks through the core and records every event, in order, and in `where`
    the (topic suffix, key) each was written with."""

    def __init__(self, config: CoordinatorConfig = CONFIG) -> None:
        self.state = ClusterState.initial(config)
        self.log: list = []
        self.where: list[tuple[str, str]] = []

    def feed(self, event, now: float) -> list:
        out = react(self.state, event, now)
        self._record([event], [fed(event)])
        self._record(out, [route(e) for e in out])
        return out

    def tick(self, now: float) -> list:
        out = settle(self.state, tick(self.state, now), now)
        self._record(out, [route(e) for e in out])
        return out

    def placed(self) -> list[tuple[tuple[str, str], object]]:
        """((topic suffix, key), event) of every event, in order."""
        return list(zip(self.where, self.log, strict=True))

    def _record(self, events: list, where: list[tuple[str, str]]) -> None:
        self.log += events
        self.where += where

    def ack(self, commands: list, status: str, now: float, reason: str | None = None) -> list:
        out = []
        for command in of_type(commands, "command"):
            out += self.feed(CommandAcked(ts=now, node=command.node, command_id=command.id, job=command.job,
                                          generation=command.generation, status=status, reason=reason), now)
        return out

    def started(self, now: float = 1.0) -> list:
        """Submit the job and let every start command be done."""
        commands = self.feed(submitted(), now)
        self.ack(commands, "accepted", now + 1)
        self.ack(commands, "done", now + 2)
        return commands
