"""The planner's objective for one job: F, C and G of docs/planner.md, kept apart from the solver so
that tests and the benchmark's plain dynamic program score a plan with exactly the same numbers.
"""

from __future__ import annotations

from collections.abc import Mapping, Set
from dataclasses import dataclass
from functools import cached_property

from trainmedic.schemas.plan import PlannedJob, PlanRequest


@dataclass(frozen=True)
class JobObjective:
    """F(x), C(x) and G(x) of one job, with the request's horizon and defaults applied."""

    weight: float
    table: Mapping[int, float]
    current_size: int
    affected: bool
    transition_s: float
    horizon_s: float
    most: int | None = None  # the most nodes it can be given (its pool's), None: any number

    @classmethod
    def of(cls, job: PlannedJob, request: PlanRequest, healthy: Set[str], most: int | None = None
           ) -> JobObjective:
        """The job's objective; `healthy` holds the ids of the nodes that are up, `most` the most nodes
        it can be given (`room`)."""
        return cls(
            weight=job.weight,
            table=job.throughput,
            current_size=len(job.current),
            affected=any(node not in healthy for node in job.current),
            transition_s=request.transition_s if job.transition_s is None else job.transition_s,
            horizon_s=request.horizon_s,
            most=most,
        )

    @cached_property
    def sizes(self) -> list[int]:
        """The sizes the job may be given, ascending: 0 and every size of its table (that its pool
        holds, for a job with one)."""
        return [0, *sorted(size for size in self.table if self.most is None or size <= self.most)]

    @cached_property
    def current_throughput(self) -> float:
        """T(p). A size missing from the table takes the largest listed size below it.

        That only shifts the reported objective: such a job cannot stay at p, so C is the
        same for every x and the choice of sizes does not depend on it.
        """
        below = sorted(size for size in self.table if size <= self.current_size)
        return self.table[below[-1]] if below else 0.0

    def throughput(self, x: int) -> float:
        """T(x), with T(0) = 0; x must be 0 or a size of the table."""
        return 0.0 if x == 0 else self.table[x]

    def value(self, x: int) -> float:
        """F(x) = w · T(x): weighted achieved FLOP/s at size x."""
        return self.weight * self.throughput(x)

    def cost(self, x: int) -> float:
        """C(x): the weighted work lost while the job moves, if it moves at all."""
        if not self.affected and x == self.current_size:
            return 0.0
        return self.weight * self.current_throughput * self.transition_s

    def gain(self, x: int) -> float:
        """G(x) = F(x) · horizon_s − C(x), what the plan maximizes the sum of."""
        return self.value(x) * self.horizon_s - self.cost(x)


def objectives(request: PlanRequest) -> list[JobObjective]:
    """One objective per job of the request, in the request's order."""
    healthy = {node.id for node in request.nodes if node.healthy}
    reserved = {node for job in request.jobs if job.pool is not None for node in job.pool}
    if not reserved:
        return [JobObjective.of(job, request, healthy) for job in request.jobs]
    held = {node: job.id for job in request.jobs for node in job.current}
    outside = len(healthy - reserved)
    return [JobObjective.of(job, request, healthy, room(job, healthy, held, reserved, outside))
            for job in request.jobs]


def room(job: PlannedJob, healthy: Set[str], held: Mapping[str, str], reserved: Set[str], outside: int
         ) -> int:
    """The most nodes a job can be given where some jobs have a pool: a job with a pool, the healthy
    nodes of its pool no other job runs; a job without one, the healthy nodes of no pool (`outside`)
    and those of a pool it runs on."""
    if job.pool is not None:
        return sum(node in healthy and held.get(node, job.id) == job.id for node in set(job.pool))
    return outside + sum(node in healthy and node in reserved for node in job.current)
