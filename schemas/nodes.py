"""A node's life in the pool (key: the node): operators' cordon, drain and uncordon on `nodes`, signed
by an operator key (docs/coordinator.md, "Node lifecycle"); re-admissions are in schemas/recovery.py.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field

from trainmedic.schemas.base import NodeEvent, Signed
from trainmedic.schemas.bounds import Id, Text


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


NodeLifecycle = Annotated[NodeCordoned | NodeDrained | NodeUncordoned, Field(discriminator="type")]
"""What the `nodes` topic carries: operators' events (a re-admission is the coordinator's: `recovery`)."""
