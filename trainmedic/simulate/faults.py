"""One failure of a trace, as every trace generator writes it and every policy reads it."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True, order=True)
class Fault:
    """A failure at `ts` (seconds from the start of the simulation) on `node`.

    `category` is a TAXONOMY.md category (`trainmedic.streams.core.taxonomy.CATEGORIES`): it decides the
    severity the detector gives it and so what trainmedic does. `cause` is the source's own name
    for it ("faulty GPU", "HBM3 memory", "NCCL timeout"), kept for the report. `repair_s` > 0 takes
    the node out of service for that long (a hardware fault: the node is repaired, then returns);
    0 is a fault of the processes, which a restart of the job cures.
    """

    ts: float
    node: str
    category: str
    cause: str
    repair_s: float = 0.0

    @property
    def breaks_node(self) -> bool:
        return self.repair_s > 0
