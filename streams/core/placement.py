"""Which node may speak for a job's generation (docs/detection.md, "Generations come from the coordinator").

A node tags only records about itself, but under its own name it could report ranks of any job: a
`worker_start` far ahead fenced off every real report of the job, a forged `worker_error` moved a rank
onto the forger. So, where the detector holds the coordinator's keys, a job is created or moved to a
generation only by an event whose `placement` is the coordinator-signed placement (of a `start` or
`restart` command) of that generation's ranks on the event's node, this rank among them: the node is
then placed for those ranks (`JobWatch.placed`). Every other report of the job's generation is used
only about a rank placed on the node that sends it. The signature is checked by the adapter
(`Placed`): no crypto here.
"""

from __future__ import annotations

from collections.abc import Callable

from trainmedic.schemas.commands import Placement
from trainmedic.schemas.telemetry import WorkerEvent
from trainmedic.streams.core.limits import LimitCounts
from trainmedic.streams.core.state import JobWatch

# A placement as JSON, and the node that sent it -> the placement, when a trusted coordinator key signed
# it for this deployment; else None (streams/placements.py).
Placed = Callable[[str, str], Placement | None]


class Placements:
    """The check, on when `placed` is given; the events it refused, with the reason, for the caller to
    dead-letter (`take`), and their count in `counts.unplaced`."""

    def __init__(self, placed: Placed | None, counts: LimitCounts) -> None:
        self.placed, self.counts = placed, counts
        self.refused: list[tuple[WorkerEvent, str]] = []

    def placing(self, job: JobWatch | None, ev: WorkerEvent, announces: bool) -> bool | None:
        """Whether `ev` (`announces`: a `worker_start` or `worker_exit`) places its node on its job's
        generation (True: its placement verifies), may be used as any report (False: from a node placed
        for the job's generation, or one not known; or it is of another generation, which the generation
        rules judge as before), or is refused (None: counted and, where it would have created or moved a
        job or come from an unplaced node of it, kept in `refused`; one merely of a job not followed,
        which an honest node sends to a detector started without its checkpoint, is only counted)."""
        if job is not None and (ev.generation < job.gen or ev.generation == job.gen and (
                job.placed is None or ev.rank in job.placed.get(ev.node, ()))):
            return False
        why = self._why(ev) if announces else None
        if announces and why is None:
            return True
        if not announces and job is not None and ev.generation > job.gen:
            return False  # not an announcement: the generation rules refuse it, as they always did
        self.counts.unplaced += 1
        if job is not None or announces:
            self.refused.append((ev, f"unplaced: node {ev.node} holds no placement of rank {ev.rank} of job "
                                     f"{ev.job} generation {ev.generation}" + (f" ({why})" if why else "")))
        return None

    def _why(self, ev: WorkerEvent) -> str | None:
        """Why `ev`'s own placement does not place it; None when it does."""
        raw = getattr(ev, "placement", None)
        if raw is None:
            return "it carries none"
        placement = self.placed(raw, ev.node)
        if placement is None:
            return "its placement is none a trusted coordinator key signed for this deployment"
        if (placement.node, placement.job, placement.generation) != (ev.node, ev.job, ev.generation):
            return (f"its placement is of job {placement.job} generation {placement.generation} on "
                    f"{placement.node}")
        if ev.rank not in placement.ranks:
            return f"its placement places no rank {ev.rank} there"
        return None

    def ranks(self, ev: WorkerEvent) -> frozenset[int]:
        """The ranks the (verified) placement of a placing event puts on its node."""
        placement = self.placed(ev.placement, ev.node)
        return frozenset(placement.ranks)

    def take(self) -> list[tuple[WorkerEvent, str]]:
        refused, self.refused = self.refused, []
        return refused
