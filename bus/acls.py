"""Who may do what on Kafka: one principal per role, least privilege, as one table applied once per
topic prefix (`bindings(prefix)`; docs/security.md, "Broker authentication and ACLs").
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    ResourcePatternType,
    ResourceType,
)

from trainmedic.schemas.topics import SPECS

__all__ = ["ADMIN", "GRANTS", "NODE", "RETIRED", "ROLES", "Grant", "bindings", "filters", "node_principal"]

ADMIN = "admin"  # the broker's super user: topics and ACLs, never a service

READ, WRITE, DESCRIBE = AclOperation.READ, AclOperation.WRITE, AclOperation.DESCRIBE
CREATE = AclOperation.CREATE
TOPIC, GROUP, TXN = ResourceType.TOPIC, ResourceType.GROUP, ResourceType.TRANSACTIONAL_ID
LITERAL, PREFIXED = ResourcePatternType.LITERAL, ResourcePatternType.PREFIXED


@dataclass(frozen=True)
class Grant:
    """`operations` on the resource `{prefix}{name}` (the whole name, or every name it starts)."""

    resource: ResourceType
    name: str
    operations: tuple[AclOperation, ...]
    pattern: ResourcePatternType = LITERAL


def reads(*suffixes: str) -> tuple[Grant, ...]:
    return tuple(Grant(TOPIC, s, (READ, DESCRIBE)) for s in suffixes)


def writes(*suffixes: str) -> tuple[Grant, ...]:
    return tuple(Grant(TOPIC, s, (WRITE,)) for s in suffixes)


def groups(*stems: str) -> tuple[Grant, ...]:
    """Consumer groups named `{prefix}{stem}…`: librdkafka asks for a consumer's group coordinator
    (Describe) even when it only reads assigned partitions and commits nothing."""
    return tuple(Grant(GROUP, stem, (READ, DESCRIBE), PREFIXED) for stem in stems)


def owns(stem: str) -> tuple[Grant, ...]:
    """A service's own topics (created, read and written by it) and consumer groups: every name
    under `{prefix}{stem}`."""
    return (Grant(TOPIC, stem, (CREATE, READ, WRITE, DESCRIBE), PREFIXED), *groups(stem))


TELEMETRY = ("telemetry.gpu", "telemetry.node", "telemetry.worker")
CONTRACT = tuple(spec.suffix for spec in SPECS)  # every topic of the event contract

GRANTS: dict[str, tuple[Grant, ...]] = {
    # Node agents and GPU producers.
    "agent": writes("telemetry.gpu", "telemetry.node"),
    "detector": (
        *reads(*TELEMETRY), *writes("incidents", "dlq"), *owns("detector"),
        Grant(TXN, "detector", (WRITE, DESCRIBE), PREFIXED),  # a sharded detector's ingest instances
    ),
    "coordinator": (
        *reads("jobs", "nodes", "incidents", "acks", "commands", "recovery"),
        *writes("commands", "recovery", "dlq"),  # `recovery`: its decisions, which no one else writes
        *owns("coordinator"),  # the lease topic and group
        Grant(TXN, "coordinator", (WRITE, DESCRIBE)),  # one transaction per decision
    ),
    # The node's executor: commands in; acks, its ranks' exits and (checked) reports out.
    "executor": (*reads("commands"), *writes("acks", "telemetry.worker", "dlq"), *groups("executor-")),
    # People's CLIs: submit jobs, cordon nodes, and read everything back.
    "operator": (*reads(*CONTRACT), *writes("jobs", "nodes"),
                 *groups("job-", "nodes-", "incidents-", "record-", "read-", "demo-")),
    # The alert bridge: incidents in, delivered alerts out; its consumer group.
    "ops": (*reads("incidents", "recovery"), *writes("alerts", "dlq"), *owns("alerts")),
}
ROLES = (*GRANTS, ADMIN)
# A node's own principal, `node-NAME` (`trainmedic broker add-node`): what its agent and its executor
# may do, and no more; what it writes about other nodes is refused where it is read (its telemetry's
# MACs, bus/telemetry_keys.py; its acks' signatures).
NODE = "node-"
NODE_GRANTS = (*GRANTS["agent"], *GRANTS["executor"])
_NODE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,62}")


def node_principal(node: str) -> str:
    """The SCRAM user of node `node`; ValueError for a name a principal cannot carry."""
    if not _NODE_NAME.fullmatch(node):
        raise ValueError(f"{node!r} cannot name a node's principal: letters, digits, '.', '_' and '-', "
                         "at most 63, starting with a letter or digit")
    return NODE + node
# Principals an earlier version had: `broker start` deletes their users and ACLs. `rank` wrote
# worker telemetry from the training ranks themselves; their executor now publishes it for them.
RETIRED = ("rank",)


def bindings(prefix: str, nodes: tuple[str, ...] = ()) -> list[AclBinding]:
    """Every role's ACLs for the deployment under `prefix`, one binding per operation, and those of the
    node principals `nodes` (their user names, `node-NAME`)."""
    every = [*GRANTS.items(), *((user, NODE_GRANTS) for user in nodes)]
    return [
        AclBinding(grant.resource, prefix + grant.name, grant.pattern, f"User:{user}", "*",
                   operation, AclPermissionType.ALLOW)
        for user, grants in every for grant in grants for operation in grant.operations
    ]


def filters(prefix: str, nodes: tuple[str, ...] = ()) -> list[AclBindingFilter]:
    """Filters matching exactly the bindings of `prefix`, those of the node principals `nodes` too (to
    revoke them)."""
    seen = {(b.restype, b.name, b.resource_pattern_type, b.principal) for b in bindings(prefix, nodes)}
    return [AclBindingFilter(restype, name, pattern, principal, "*", AclOperation.ANY, AclPermissionType.ANY)
            for restype, name, pattern, principal in sorted(seen, key=str)]
