"""The planner's input and output, as PLANNER.md fixes them.

First version, refined by the coordinator issue.
"""

from __future__ import annotations

from pydantic import ConfigDict, Field, model_validator

from schemas.base import Model


class StrictModel(Model):
    """Planner input is a document a person writes: unknown fields are mistakes, not extensions."""

    model_config = ConfigDict(frozen=True, extra="forbid")


class ClusterNode(StrictModel):
    id: str = Field(min_length=1)
    healthy: bool = True
    switch: str | None = None
    gpus: int = Field(default=8, ge=1)


class PlannedJob(StrictModel):
    id: str = Field(min_length=1)
    weight: float = Field(default=1.0, gt=0)
    throughput: dict[int, float]
    current: tuple[str, ...] = ()
    transition_s: float | None = Field(default=None, ge=0)

    @model_validator(mode="after")
    def _check(self) -> PlannedJob:
        if not self.throughput:
            raise ValueError(f"job {self.id}: throughput needs at least one size")
        bad = [size for size in self.throughput if size <= 0]
        if bad:
            raise ValueError(f"job {self.id}: throughput sizes must be positive, got {bad}")
        if len(set(self.current)) != len(self.current):
            raise ValueError(f"job {self.id}: current lists a node twice")
        return self


class PlanRequest(StrictModel):
    nodes: tuple[ClusterNode, ...]
    jobs: tuple[PlannedJob, ...]
    horizon_s: float = Field(gt=0)
    transition_s: float = Field(default=60.0, ge=0, description="default for jobs without one")

    @model_validator(mode="after")
    def _check(self) -> PlanRequest:
        ids = [n.id for n in self.nodes]
        dupes = sorted({i for i in ids if ids.count(i) > 1})
        if dupes:
            raise ValueError(f"nodes lists {', '.join(dupes)} more than once")
        job_ids = [j.id for j in self.jobs]
        if len(set(job_ids)) != len(job_ids):
            raise ValueError("jobs lists a job id more than once")
        known = set(ids)
        for job in self.jobs:
            unknown = [n for n in job.current if n not in known]
            if unknown:
                raise ValueError(f"job {job.id}: current names unknown nodes {unknown}")
        return self


class RecoveryPlan(Model):
    """The planner's answer: which nodes each job gets, and what that plan is worth."""

    allocations: dict[str, tuple[str, ...]]
    sizes: dict[str, int]
    waf: float
    objective: float
