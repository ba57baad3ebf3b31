"""The planner's input and output, as docs/planner.md fixes them; input errors name the place they
occur (`jobs[1].current`), since a person usually writes the request or reads it when a plan looks wrong.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import ConfigDict, Field, Strict, field_validator, model_validator

from trainmedic.schemas.base import Model
from trainmedic.schemas.bounds import MAX_ITEMS, MAX_TS
from trainmedic.schemas.commands import RestoreSource

# What one job may ask of the planner (docs/planner.md, "Bounds"). A weight is a priority relative
# to the default 1: at 1000 a job already comes first unless another runs 1000 x its FLOP/s. 1e17
# FLOP/s per node is above any 8-GPU node made. With times capped at MAX_TS every sum the planner
# forms stays finite (1000 x 1e23 x 2.5e11 per job); the coordinator rejects a job submission past
# these (recovery/coordinator/core/job_bounds.py).
MAX_JOB_WEIGHT = 1000.0
MAX_NODE_FLOPS = 1e17

# Scalars are strict, so `"healthy": "yes"` or `"gpus": "8"` is an error rather than a guess.
Id = Annotated[str, Strict(), Field(min_length=1)]
Number = Annotated[float, Strict()]  # a JSON integer is fine, a string or a boolean is not
Seconds = Annotated[float, Strict(), Field(ge=0, le=MAX_TS)]


class StrictModel(Model):
    """Planner input is a document a person writes: unknown fields are mistakes, not extensions."""

    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)


class ClusterNode(StrictModel):
    """One machine; `switch` is its leaf switch, null when it hangs directly off the spine."""

    id: Id
    healthy: Annotated[bool, Strict()] = True
    switch: Annotated[str, Strict(), Field(min_length=1)] | None = None
    gpus: Annotated[int, Strict(), Field(ge=1)] = 8


class PlannedJob(StrictModel):
    """A running or queued job as the planner sees it: sizes it can run at, and where it runs."""

    id: Id
    weight: Number = Field(default=1.0, gt=0, le=MAX_JOB_WEIGHT)
    throughput: dict[int, Annotated[Number, Field(ge=0)]] = Field(
        description="nodes -> achieved FLOP/s at that size; only these sizes (or 0) are allowed"
    )
    current: tuple[Id, ...] = ()
    transition_s: Seconds | None = None
    pool: tuple[Id, ...] | None = Field(default=None, max_length=MAX_ITEMS, description="the only nodes "
                                        "the job may be placed on; none: any")

    @field_validator("throughput")
    @classmethod
    def _positive_sizes(cls, table: dict[int, float]) -> dict[int, float]:
        if not table:
            raise ValueError("needs at least one size")
        bad = sorted(size for size in table if size <= 0)
        if bad:
            raise ValueError(f"sizes must be positive node counts, got {bad}")
        for size, flops in sorted(table.items()):
            if size > MAX_ITEMS:
                raise ValueError(f"size {size} is more nodes than a cluster has ({MAX_ITEMS})")
            if flops > size * MAX_NODE_FLOPS:
                raise ValueError(f"{flops:g} FLOP/s at size {size} is above {MAX_NODE_FLOPS:g} per node")
        return table

    @field_validator("current")
    @classmethod
    def _distinct(cls, current: tuple[str, ...]) -> tuple[str, ...]:
        seen: set[str] = set()
        for node in current:
            if node in seen:
                raise ValueError(f"node {node!r} is listed twice")
            seen.add(node)
        return current


class PlanRequest(StrictModel):
    """Everything one planning call needs: the cluster, its jobs and the expected horizon."""

    nodes: tuple[ClusterNode, ...]
    jobs: tuple[PlannedJob, ...]
    horizon_s: Number = Field(gt=0, le=MAX_TS, description="expected running time until the next failure")
    transition_s: Seconds = Field(default=60.0, description="default for jobs without one")

    @field_validator("nodes")
    @classmethod
    def _distinct_nodes(cls, nodes: tuple[ClusterNode, ...]) -> tuple[ClusterNode, ...]:
        first: dict[str, int] = {}
        for i, node in enumerate(nodes):
            if node.id in first:
                raise ValueError(f"node {node.id!r} is listed twice (nodes[{first[node.id]}] "
                                 f"and nodes[{i}])")
            first[node.id] = i
        return nodes

    @field_validator("jobs")
    @classmethod
    def _distinct_jobs(cls, jobs: tuple[PlannedJob, ...]) -> tuple[PlannedJob, ...]:
        first: dict[str, int] = {}
        for i, job in enumerate(jobs):
            if job.id in first:
                raise ValueError(f"job {job.id!r} is listed twice (jobs[{first[job.id]}] "
                                 f"and jobs[{i}])")
            first[job.id] = i
        return jobs

    @model_validator(mode="after")
    def _current_nodes_exist_once(self) -> PlanRequest:
        known = {node.id for node in self.nodes}
        owner: dict[str, int] = {}
        for i, job in enumerate(self.jobs):
            for node in job.current:
                if node not in known:
                    raise ValueError(f"jobs[{i}].current: node {node!r} is not in nodes")
                if node in owner:
                    raise ValueError(f"jobs[{i}].current: node {node!r} already runs job "
                                     f"{self.jobs[owner[node]].id!r} (jobs[{owner[node]}])")
                owner[node] = i
        return self


class RecoveryPlan(Model):
    """The planner's answer: which nodes each job gets, and what that plan is worth.

    `restore` names, for each node that joins a job, where its ranks take their state from.
    """

    allocations: dict[str, tuple[str, ...]]
    sizes: dict[str, int]
    waf: float
    objective: float
    restore: dict[str, RestoreSource] = {}
