"""Jobs as they are asked for (a spec), and the event that registers one.

A job's nodes are host names: the coordinator addresses them by name unless its cluster
configuration maps a node to an address.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator, model_validator

from schemas.base import Event, Model, Signed
from schemas.bounds import MAX_ITEMS, MAX_SMALL_ITEMS, Flops, Id, Name, ProcessText, Seconds, Weight


class JobSpec(Model):
    """What a user asks to run: sizes it can run at, where, and how to launch a rank."""

    id: Id
    weight: Weight = 1.0
    throughput: dict[int, Flops] = Field(max_length=MAX_ITEMS,
                                         description="nodes -> achieved FLOP/s at that size")
    nodes: tuple[Name, ...] = Field(default=(), max_length=MAX_ITEMS)
    ranks_per_node: int = Field(default=1, ge=1, le=MAX_SMALL_ITEMS)
    master_port: int = Field(default=29500, ge=1, le=65535, description="rendezvous port on rank 0's node")
    command: tuple[ProcessText, ...] = Field(min_length=1, max_length=MAX_SMALL_ITEMS,
                                             description="argv that launches one rank")
    checkpoint_dir: ProcessText | None = None
    transition_s: Seconds | None = None

    @field_validator("throughput")
    @classmethod
    def _positive_sizes(cls, table: dict[int, float]) -> dict[int, float]:
        if not table:
            raise ValueError("throughput needs at least one size")
        for size, flops in table.items():
            if size <= 0:
                raise ValueError(f"throughput size {size} must be a positive node count")
            if size > MAX_ITEMS:
                raise ValueError(f"throughput size {size} is more nodes than a cluster has ({MAX_ITEMS})")
            if flops < 0:
                raise ValueError(f"throughput at size {size} must not be negative")
        return table

    @model_validator(mode="after")
    def _nodes_fit_the_table(self) -> JobSpec:
        if len(set(self.nodes)) != len(self.nodes):
            raise ValueError("nodes lists a node twice")
        if self.nodes and len(self.nodes) not in self.throughput:
            sizes = ", ".join(str(size) for size in sorted(self.throughput))
            raise ValueError(f"nodes names {len(self.nodes)} nodes, but throughput lists only sizes {sizes}")
        return self


class JobSubmitted(Event, Signed):
    """A job was registered with the coordinator, signed by an operator's key (`Signed`)."""

    type: Literal["job_submitted"] = "job_submitted"
    job: JobSpec
