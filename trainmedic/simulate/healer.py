"""The `trainmedic` policy: the real coordinator's core (fold, decide, tick, the planner) driven by
simulated time, with the world playing the detector, the executors and the operator
(docs/simulation.md, "The policies").
"""

from __future__ import annotations

from trainmedic.recovery.coordinator.core.blame import HEALTH_CHECK_FAILED, signature
from trainmedic.recovery.coordinator.core.config import CoordinatorConfig, NodeConfig
from trainmedic.recovery.coordinator.core.decide import ESCALATION
from trainmedic.recovery.coordinator.core.fold import apply
from trainmedic.recovery.coordinator.core.isolation import node_group
from trainmedic.recovery.coordinator.core.lifecycle import new_work_refused, suspects
from trainmedic.recovery.coordinator.core.limits import restart_due
from trainmedic.recovery.coordinator.core.state import ClusterState
from trainmedic.recovery.coordinator.core.steps import react, settle, tick
from trainmedic.schemas.commands import AckStatus, Command, CommandAcked, CommandAction
from trainmedic.schemas.incident import Incident, IncidentStatus, Progress
from trainmedic.schemas.jobs import JobSpec, JobSubmitted
from trainmedic.schemas.nodes import NodeDrained, NodeReadmitted, NodeUncordoned
from trainmedic.schemas.recovery import RecoveryCompleted, RecoveryKind, RecoveryPlanned, RecoverySkipped
from trainmedic.simulate.detection import detect_s
from trainmedic.simulate.faults import Fault
from trainmedic.simulate.progress import Down, JobProgress, Restore
from trainmedic.simulate.scenario import TrainmedicCosts
from trainmedic.simulate.world import Policy, World
from trainmedic.streams.core.config import DetectorConfig
from trainmedic.streams.core.taxonomy import CATEGORIES

EPOCH = 1_700_000_000.0  # simulated second 0 as the coordinator sees it (Unix time)
EPSILON = 1e-3  # a tick just after a deadline, so the deadline has passed
# a command or a health check failed: paged
ESCALATIONS = frozenset(category for _, _, category in ESCALATION.values()) | {HEALTH_CHECK_FAILED}


class Healer(Policy):
    name = "trainmedic"

    def __init__(self, world: World, costs: TrainmedicCosts) -> None:
        super().__init__(world)
        self.costs = costs
        gpus = world.scenario.cluster.gpus_per_node
        config = CoordinatorConfig(nodes=tuple(NodeConfig(id=n.id, switch=n.switch, gpus=gpus)
                                               for n in world.nodes), **costs.coordinator)
        self.state = ClusterState.initial(config)
        self.open: dict[str, list[str]] = {}  # job -> its open incidents, resolved by a new generation
        self.node_incidents: dict[str, list[Incident]] = {}  # node -> open incidents it repairs
        self.plans: dict[tuple[str, str], RecoveryPlanned] = {}  # (plan id, job): a re-plan moves many jobs
        self.ticks: set[float] = set()
        self.gave_up: set[str] = set()
        self.names: dict[str, str] = {}  # a job a person submitted again -> the scenario's job (its book)
        self.current: dict[str, str] = {}  # the scenario's job -> the job it was last submitted again as
        self.drained: set[str] = set()  # nodes the simulated operator drained
        self.detector = DetectorConfig.from_dict(costs.detector)
        self._count = 0

    # --- the world's events -------------------------------------------------------------------

    def start(self) -> None:
        nodes = iter(node.id for node in self.world.nodes)
        for model in self.world.scenario.jobs:
            book = self.world.books[model.id]
            spec = JobSpec(id=model.id, weight=model.weight, throughput=book.table,
                           nodes=tuple(next(nodes) for _ in range(model.nodes)), command=("train",),
                           checkpoint_dir=f"/checkpoints/{model.id}",
                           transition_s=self.costs.restart.at(model.nodes))
            self._coordinate(JobSubmitted(ts=EPOCH, job=spec), started=True)

    def fault(self, fault: Fault) -> None:
        now = self.world.now
        job = self.state.job_on(fault.node)
        book = self._book(job.spec.id) if job is not None else None
        stopped = book is not None and book.stop(now)
        if not stopped and not fault.breaks_node:
            return  # a process fault where no rank runs: nothing failed
        step_s = book.model.step_s if book is not None else 0.0  # only a hang needs the job's step time
        delay = detect_s(fault.category, step_s, self.costs.pipeline_s, self.costs.detect_s, self.detector)
        progress = progress_of(book) if book is not None and not fault.breaks_node else None
        self.world.at(now + delay, self._detected, fault, job.spec.id if job is not None else None, progress)

    def repaired(self, node: str) -> None:
        for incident in self.node_incidents.pop(node, []):
            self._resolve(incident)
        if node in self.drained or self.costs.returns == "uncordon":
            self.drained.discard(node)
            self._coordinate(NodeUncordoned(ts=EPOCH + self.world.now, node=node, reason="repaired"))
            self._tick_at(self.world.now + self.state.config.tick_s)
        else:
            self._tick_at(self.world.now + self.state.config.readmit_probation_s + EPSILON)

    # --- the detector ---------------------------------------------------------------------------

    def _detected(self, fault: Fault, job: str | None, progress: Progress | None = None) -> None:
        """The fault's incident; a job's own failure carries how far the generation that failed got
        (the worker's step telemetry), which the coordinator's restart budget reads."""
        now = self.world.now
        category = CATEGORIES[fault.category]
        self._count += 1
        incident = Incident(
            ts=EPOCH + now, id=f"sim-{fault.category}-{self._count}", status=IncidentStatus.OPEN,
            category=fault.category, severity=category.severity, action=category.action, job=job,
            node=fault.node, first_ts=EPOCH + fault.ts, evidence=(fault.cause,), progress=progress)
        if fault.breaks_node:
            self.node_incidents.setdefault(fault.node, []).append(incident)
        elif job is not None:
            self.open.setdefault(job, []).append(incident.id)
        self._coordinate(incident)
        if fault.breaks_node and self.world.broken.get(fault.node) != fault.ts + fault.repair_s:
            # repaired before its incident opened: resolved once the coordinator decided it (else the
            # node waits for a repair that is over, and its job for a decision that never comes)
            self.world.at(now + self.state.config.group_window_s + 2 * EPSILON, self.repaired, fault.node)

    def _resolve(self, incident: Incident) -> None:
        self._coordinate(incident.model_copy(update={"ts": EPOCH + self.world.now,
                                                      "status": IncidentStatus.RESOLVED}))

    # --- the coordinator and the executors ------------------------------------------------------

    def _coordinate(self, event: object, *, started: bool = False) -> None:
        self._handle(react(self.state, event, EPOCH + self.world.now), started=started)

    def _tick(self, ts: float) -> None:
        self.ticks.discard(ts)
        now = EPOCH + self.world.now
        self._handle(settle(self.state, tick(self.state, now), now))

    def _tick_at(self, ts: float) -> None:
        if ts not in self.ticks:
            self.ticks.add(ts)
            self.world.at(ts, self._tick, ts)

    def _handle(self, outputs: list, *, started: bool = False) -> None:
        """Act on what the coordinator decided: plans move jobs, commands get answered, outcomes
        resume jobs; then tick when the next thing it waits for can be due."""
        now = self.world.now
        commands: dict[tuple[str, str], list[Command]] = {}
        for event in outputs:
            match event:
                case RecoveryPlanned():
                    self.plans[event.plan_id, event.job] = event
                    book = self._book(event.job)
                    if book is not None and book.is_running and event.kind not in (RecoveryKind.REATTEMPT,
                                                                                   RecoveryKind.START):
                        book.reconfigure(now)  # a planned move: the job stops for it
                    elif book is not None and not book.is_running and event.kind is not RecoveryKind.STOP:
                        book.wait(now, Down.RESTART)  # (the give-up's stop: it still waits for a person)
                case Command(action=CommandAction.HEALTH_CHECK):  # a suspect node's probe passes where
                    self.world.at(now, self._answer, [event], AckStatus.DONE)  # the node is healthy;
                    self._tick_at(event.deadline - EPOCH + EPSILON)  # a broken one is silent until then
                case Command():
                    commands.setdefault((event.plan_id, event.job), []).append(event)
                case RecoveryCompleted():
                    self._completed(self.plans[event.plan_id, event.job])
                case Incident(category="recovery_failed", job=str(job)) if self._book(job) is not None:
                    self.gave_up.add(job)  # restarts spent: the coordinator's alert asks for a person
                    self._book(job).wait(now, Down.PERSON)
                    if self.costs.person_restarts:
                        self.world.at(now + self.costs.operator_s, self._submit_again, job)
                case NodeReadmitted():  # the next tick re-plans capacity with the node back
                    self._tick_at(now + self.state.config.tick_s)
                case Incident(category="mass_failure"):
                    self.world.at(now + self.costs.operator_s, self._operator)
                case Incident(category=str(category), node=str(node)) if category in ESCALATIONS:
                    after = max(self.costs.operator_s, self.state.config.group_window_s + EPSILON)
                    self.world.at(now + after, self._paged, node)  # after the isolation it pages for
                case RecoverySkipped(job=str(job)) if self._book(job) is not None:
                    self._unanswered(job)
        for key, sent in commands.items():
            plan = self.plans[key]
            delay = 0.0 if started else self._transition_s(plan)
            self.world.at(now, self._answer, sent, AckStatus.ACCEPTED)
            self.world.at(now + delay, self._answer, sent, AckStatus.DONE)
            self._tick_at(now + self.state.config.ack_timeout_s + EPSILON)  # for those nobody answers
        self._wake()

    def _unanswered(self, job: str) -> None:
        """The coordinator acts on nothing for a job that is down (past the isolation cap): it waits
        for a person, and the detector's hang rule sees it not stepping."""
        held, book = self.state.jobs.get(job), self._book(job)
        if held is None or held.state.in_flight or book.is_running:
            return
        book.wait(self.world.now, Down.PERSON)
        delay = detect_s("hang", book.model.step_s, self.costs.pipeline_s, self.costs.detect_s, self.detector)
        self.world.at(self.world.now + delay, self._still_down, job, book.faults)

    def _still_down(self, job: str, faults: int) -> None:
        book = self._book(job)
        held = self.state.jobs.get(job)
        if book.is_running or book.faults != faults or held is None or held.state.in_flight or not held.nodes:
            return
        self._detected(Fault(ts=self.world.now, node=held.nodes[0], category="hang", cause="no steps"), job,
                       progress_of(book))

    def _submit_again(self, job: str) -> None:
        """A person answers `recovery_failed` (the coordinator ended the job, its nodes free): `trainmedic
        job submit` of its spec under a new id (the fold ignores a known one), from its checkpoint, on
        its spec's nodes still fit for work topped up with free ones, at the largest size they allow;
        with too few, the person tries again `operator_s` later."""
        self._resolve_open(job)
        spec, book = self.state.jobs[job].spec, self._book(job)
        suspect, busy = suspects(self.state), {n for held in self.state.jobs.values() for n in held.nodes}
        nodes = dict.fromkeys((*spec.nodes, *(node.id for node in self.world.nodes)))
        fit = [n for n in nodes if n not in busy and new_work_refused(self.state, n, suspect) is None]
        size = max((n for n in book.table if n <= len(fit)), default=None)
        if size is None:
            self.world.at(self.world.now + self.costs.operator_s, self._submit_again, job)
            return
        again = f"{book.model.id}-{1 + sum(name == book.model.id for name in self.names.values())}"
        self.names[again], self.current[book.model.id] = book.model.id, again
        self._coordinate(JobSubmitted(ts=EPOCH + self.world.now,
                                      job=spec.model_copy(update={"id": again, "nodes": tuple(fit[:size])})))

    def _operator(self) -> None:
        """A person answers the mass-failure alert: drains the broken nodes still in service."""
        for node in sorted(self.world.broken):
            known = self.state.nodes.get(node)
            if known is not None and known.healthy and node not in self.drained:
                self.drained.add(node)
                self._coordinate(NodeDrained(ts=EPOCH + self.world.now, node=node, reason="broken"))
        self._tick_at(self.world.now + EPSILON)

    def _paged(self, node: str) -> None:
        """A person answers the page for a node the coordinator blamed for a failed command: its own
        escalation isolates it and nothing resolves that, so the person returns the node once it is
        repaired (as a drained one)."""
        if self.world.healthy(node):
            self._coordinate(NodeUncordoned(ts=EPOCH + self.world.now, node=node, reason="checked"))
            self._tick_at(self.world.now + self.state.config.tick_s)
        else:
            self.drained.add(node)

    def _transition_s(self, plan: RecoveryPlanned) -> float:
        size = max(1, len(plan.nodes))
        if plan.kind is RecoveryKind.REATTEMPT:
            return self.costs.reattempt.at(size)
        seconds = self.costs.restart.at(size)
        if any(source.kind == "checkpoint" for source in plan.restore.values()):
            seconds += self.costs.checkpoint_load.at(size)
        return seconds

    def _answer(self, commands: list[Command], status: AckStatus) -> None:
        """The executors of healthy nodes answer: `accepted` at once, `done` once the transition is
        over. The last answer is the one decided on (the coordinator decides nothing on the others:
        a plan is complete only once every command is done)."""
        now = EPOCH + self.world.now
        acks = [CommandAcked(ts=now, node=c.node, command_id=c.id, job=c.job, generation=c.generation,
                             status=status) for c in commands if self.world.healthy(c.node)]
        for ack in acks[:-1]:
            apply(self.state, ack)
        if acks:
            self._coordinate(acks[-1])
        silent = [c.ts for c in commands if not self.world.healthy(c.node) and self.state.awaited(c.node)]
        if status is AckStatus.DONE and silent:  # accepted, then the node broke: its done timeout decides
            self._tick_at(max(silent) - EPOCH + self.state.config.done_timeout_s + EPSILON)

    def _completed(self, plan: RecoveryPlanned) -> None:
        now = self.world.now
        self._tick_at(now + EPSILON)  # a quiet cluster: a capacity re-plan may be due
        book = self._book(plan.job)
        if book is None or book.is_running:
            return
        if not plan.nodes:
            book.wait(now, Down.REPAIR_WAIT)  # the planner gave it no nodes: it waits for capacity
            return
        checkpoint = any(source.kind == "checkpoint" for source in plan.restore.values())
        book.resume(now, len(plan.nodes), Restore.CHECKPOINT if checkpoint else Restore.REPLICA,
                    new_generation=plan.kind is not RecoveryKind.REATTEMPT)
        self._resolve_open(plan.job)

    def _resolve_open(self, job: str) -> None:
        """The job's open incidents resolve: it runs at a new generation, or it ended."""
        for incident_id in self.open.pop(job, []):
            incident = self.state.incidents.get(incident_id)
            if incident is not None and incident.status is IncidentStatus.OPEN:
                self._resolve(incident)

    def _book(self, job: str) -> JobProgress | None:
        """The books of the scenario's job that the coordinator's `job` runs; none for one a person has
        submitted again since (what is decided for it moves nothing)."""
        model = self.names.get(job, job)
        return self.world.books.get(model) if self.current.get(model, model) == job else None

    def _wake(self) -> None:
        """Tick when a waiting incident can be decided: a node group's window, a job's backoff."""
        config, now = self.state.config, EPOCH + self.world.now
        group = node_group(self.state)
        if group:
            self._tick_at(group[0].ts + config.group_window_s - EPOCH + EPSILON)
        for incident_id in self.state.pending:
            incident = self.state.incidents[incident_id]
            job = self.state.jobs.get(incident.job) if incident.job else None
            due = restart_due(self.state, job, signature(incident), now) if job is not None else now
            if due > now:  # one not due yet waits on its backoff
                self._tick_at(due - EPOCH + EPSILON)
            elif not group:  # one due now waited for a group decided since: the next tick decides it
                self._tick_at(self.world.now + config.tick_s)


def progress_of(book: JobProgress) -> Progress:
    """How far the job's current generation got, as the worker's step telemetry tells the detector."""
    since = None if book.first_step is None else EPOCH + book.first_step
    return Progress(steps=book.steps, since=since)
