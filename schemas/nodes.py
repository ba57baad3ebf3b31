"""A node's life in the pool (key: the node): operators' enrollment, cordon, drain, uncordon and removal
on `nodes`, signed by an operator key (docs/coordinator.md, "Node lifecycle"); re-admissions are in
schemas/recovery.py, a node's own registration in schemas/commands.py.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field

from trainmedic.schemas.base import Model, NodeEvent, Signed
from trainmedic.schemas.bounds import Id, Text, Timestamp

MAX_KEY = 64  # characters of a public key in base64 (an Ed25519 key is 44)
MAX_COORDINATORS = 16  # coordinator keys an enrollment hands a node
HostRole = Literal["coordinator", "detector", "operator"]  # recovery/join_token.py HOST_ROLES


class NodeCordoned(NodeEvent, Signed):
    """No new work goes to the node; what runs there keeps running."""

    type: Literal["node_cordoned"] = "node_cordoned"
    reason: Text = ""
    by: Text = "operator"


class NodeDrained(NodeEvent, Signed):
    """The node takes no new work and its jobs are re-planned off it now (one plan per job)."""

    type: Literal["node_drained"] = "node_drained"
    reason: Text = ""
    by: Text = "operator"


class NodeUncordoned(NodeEvent, Signed):
    """Back in the pool: ends a cordon, a drain and any isolation decided before it."""

    type: Literal["node_uncordoned"] = "node_uncordoned"
    reason: Text = ""
    by: Text = "operator"


class NodeReadmitted(NodeEvent):
    """The coordinator ends the isolation that `incident_id` caused: the incident is resolved and
    the node was clean for its probation."""

    type: Literal["node_readmitted"] = "node_readmitted"
    incident_id: Id
    reason: Text = ""
    by: Text = "coordinator"


class PublicKey(Model):
    """An Ed25519 public key: its id (recovery/signing.py `key_id_of`) and its 32 bytes in base64."""

    key_id: str = Field(min_length=1, max_length=MAX_KEY)
    public: str = Field(min_length=1, max_length=MAX_KEY)


class NodeEnrolled(NodeEvent, Signed):
    """An operator lets `node` join until `expires` (`trainmedic nodes enroll`): whoever holds the
    join token, whose public key is `token`, may register the node once. `coordinators` are the
    command keys the node will trust, as the operator trusts them."""

    type: Literal["node_enrolled"] = "node_enrolled"
    token: PublicKey
    expires: Timestamp
    coordinators: tuple[PublicKey, ...] = Field(min_length=1, max_length=MAX_COORDINATORS)
    by: Text = "operator"


class NodeRemoved(NodeEvent, Signed):
    """The node leaves the cluster for good (`trainmedic nodes remove`): its principal is deleted on
    the broker, its key is trusted no more, its jobs are moved off it. Enrolling it again starts anew."""

    type: Literal["node_removed"] = "node_removed"
    reason: Text = ""
    by: Text = "operator"


NodeLifecycle = Annotated[NodeCordoned | NodeDrained | NodeUncordoned | NodeEnrolled | NodeRemoved,
                          Field(discriminator="type")]
"""What the `nodes` topic carries: operators' events (a re-admission is the coordinator's: `recovery`)."""


class RoleKey(Model):
    """A public key and the one role it is trusted for; in a host's join, `proof` (Ed25519, base64) by
    that key over recovery/join_token.py `possession`: the host holds its private half."""

    role: Literal["coordinator", "operator"]
    key: PublicKey
    proof: str | None = Field(default=None, max_length=2 * MAX_KEY)


class HostJoin(Signed):
    """A control-plane host invited on the broker's host (`trainmedic broker invite`) asks for its
    roles, signed by its join token's key (`key_id` is the token's): the broker's host trusts `keys`
    (the host's own, one per signing role it is given), each for its role (`trainmedic join`). Not on
    a topic: the body of the registrar's `POST /host`."""

    type: Literal["host_join"] = "host_join"
    ts: Timestamp
    roles: tuple[HostRole, ...] = Field(min_length=1, max_length=3)
    keys: tuple[RoleKey, ...] = Field(default=(), max_length=2)
