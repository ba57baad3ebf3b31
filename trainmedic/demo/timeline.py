"""What the demo has seen so far, folded from the topics it watches. Pure: wall time passed in."""

from __future__ import annotations

from dataclasses import dataclass, field

from trainmedic.ops.incidents.phases import describe
from trainmedic.ops.incidents.timing import RecoveryTimer
from trainmedic.ops.incidents.views import first_step_after_repair
from trainmedic.schemas import Incident, WorkerStepped
from trainmedic.schemas.recovery import RecoveryCompleted, RecoveryFailed, RecoveryPlanned
from trainmedic.schemas.restores import restores


@dataclass
class Generation:
    """One generation of the job as its ranks reported it."""

    world_size: int
    first_step: int
    first_step_ts: float
    last_step: int
    last_step_ts: float
    step_times: set[float] = field(default_factory=set)  # when each step report of any rank was made


@dataclass
class SeenIncident:
    """An incident as the demo saw it (`incident`: its latest event): `opened_wall` when it read it,
    `published` when it reached Kafka (the message time of its opening; None where the reader gave
    none), `detection_delay_s` its opening's `ts - first_ts` (a resolved event's is its time to resolve)."""

    incident: Incident
    opened_wall: float
    resolved_wall: float | None = None
    published: float | None = None
    detection_delay_s: float | None = None


@dataclass
class Timeline:
    """Steps per generation, incidents and recovery plans of one job, in arrival order."""

    job: str
    generations: dict[int, Generation] = field(default_factory=dict)
    incidents: dict[str, SeenIncident] = field(default_factory=dict)
    planned: list[tuple[float, RecoveryPlanned]] = field(default_factory=list)
    completed: list[tuple[float, RecoveryCompleted]] = field(default_factory=list)
    failed: list[tuple[float, RecoveryFailed]] = field(default_factory=list)
    # generation -> "rank R on NODE: warning" for each rank whose restore fell back from its replica
    restore_warnings: dict[int, list[str]] = field(default_factory=dict)
    # generation -> the first step of each rank that says where its restored state came from
    restored: dict[int, list[WorkerStepped]] = field(default_factory=dict)
    recoveries: RecoveryTimer = field(default_factory=RecoveryTimer)  # each recovery by phase

    def apply(self, event: object, wall: float, published: float | None = None) -> None:
        """Fold one event read at `wall`; `published` is its Kafka message time, where known."""
        self.recoveries.apply(event, published)
        if isinstance(event, WorkerStepped) and event.job == self.job:
            self.stepped(event.generation, event.world_size, event.step, event.ts)
            if event.restore_warning:
                self.restore_warnings.setdefault(event.generation, []).append(
                    f"rank {event.rank} on {event.node}: {event.restore_warning}")
            if event.restored is not None and all(
                    seen.rank != event.rank for seen in self.restored.get(event.generation, ())):
                self.restored.setdefault(event.generation, []).append(event)
        elif isinstance(event, Incident):
            seen = self.incidents.get(event.id)
            if seen is None:
                self.incidents[event.id] = seen = SeenIncident(event, wall)
            if event.status == "open":
                seen.detection_delay_s = event.ts - event.first_ts
                if published is not None:
                    seen.published = min(published, seen.published or published)
            if event.status == "resolved":
                seen.incident, seen.resolved_wall = event, wall
        elif isinstance(event, RecoveryPlanned) and event.job == self.job:
            self.planned.append((wall, event))
        elif isinstance(event, RecoveryCompleted) and event.job == self.job:
            self.completed.append((wall, event))
        elif isinstance(event, RecoveryFailed) and event.job == self.job:
            self.failed.append((wall, event))

    def stepped(self, generation: int, world_size: int, step: int, ts: float) -> None:
        """A rank of `generation` completed `step` at `ts` (from telemetry, or a rank's stdout)."""
        gen = self.generations.get(generation)
        if gen is None:
            self.generations[generation] = gen = Generation(world_size, step, ts, step, ts)
        else:
            gen.first_step = min(gen.first_step, step)
            if step >= gen.last_step:
                gen.last_step, gen.last_step_ts = step, ts
        gen.step_times.add(ts)

    def phases_of(self, incident_id: str) -> str | None:
        """Where the seconds of the job's recovery from `incident_id` went, in a line (None: not
        stepping again yet, or not a restart)."""
        return next((describe(found) for view, found in self.recoveries.timed(self.job)
                     if view.id == incident_id), None)

    def restore_of(self, generation: int) -> str | None:
        """Where `generation`'s ranks took their state from, in a line (None: none reported yet)."""
        done = restores(self.restored.get(generation, ()))
        return done[0].describe() if done else None

    def steps_lost(self, before: int, after: int) -> int:
        """Completed steps of generation `before` that generation `after` had to run again."""
        return max(0, self.generations[before].last_step + 1 - self.generations[after].first_step)

    @property
    def generation(self) -> int | None:
        return max(self.generations) if self.generations else None

    @property
    def current(self) -> Generation | None:
        return self.generations[self.generation] if self.generations else None

    def incidents_since(self, wall: float) -> list[SeenIncident]:
        return [s for s in self.incidents.values() if s.opened_wall >= wall]

    def plan_for(self, incident_id: str) -> RecoveryPlanned | None:
        return next((p for _, p in self.planned if p.incident_id == incident_id), None)

    def resumed_in_place(self, incident_id: str, generation: int) -> float | None:
        """When `generation` completed its first step after the reattempt that answered `incident_id`
        was acknowledged (the incident log's definition: `first_step_after_repair`)."""
        plan = self.plan_for(incident_id)
        gen = self.generations.get(generation)
        if plan is None or gen is None:
            return None
        return first_step_after_repair(plan, tuple(c for _, c in self.completed), gen.step_times)

