"""Rules about jobs and their ranks: failures reported by workers (correlated into one incident per
fault), hangs, stragglers, and which ranks run on which node; what a job reports concerns only that
job (docs/detection.md, "What a job reports concerns only that job", "Hang").
"""

from __future__ import annotations

from trainmedic.schemas import wire
from trainmedic.schemas.telemetry import WorkerEvent, WorkerExited, WorkerFailed, WorkerStarted, WorkerStepped
from trainmedic.streams.core.config import DetectorConfig
from trainmedic.streams.core.correlation import add_clue, decide, held_until, overdue_until, settle
from trainmedic.streams.core.deadlines import Deadlines, Timer
from trainmedic.streams.core.hang import describe_threshold, record_step_time, stopped_first, threshold
from trainmedic.streams.core.incidents import IncidentBook
from trainmedic.streams.core.job_end import note_ended, over, refused
from trainmedic.streams.core.node_rules import NodeRules
from trainmedic.streams.core.placement import Placed, Placements
from trainmedic.streams.core.state import Clue, DetectorState, JobWatch, OpenIncident, RankState
from trainmedic.streams.core.straggler import rank_medians, record_rank_step
from trainmedic.streams.core.taxonomy import (
    CATEGORIES,
    CONSEQUENCE_SPECIFICITY,
    Hold,
    Resolves,
    classify_error,
    error_signature,
    jobs_resolve,
    last_words,
)

# A coordinator's plan moves a job one generation ahead; a few plans may fail before any rank
# starts. Far more is no restart: one forged report would fence off every real one after it.
GENERATION_JUMP = 16
EXITS = (WorkerExited, wire.WorkerExited)  # the contract's model, its fast twins (trusted ones subclass it)
# Jobs known only from reports other than worker_start (a detector started without its checkpoint
# on a running cluster has many; invented job names have any number): followed up to this many.
UNSTARTED_JOBS = 1024


class JobRules:
    def __init__(self, state: DetectorState, config: DetectorConfig, book: IncidentBook,
                 timers: Deadlines, nodes: NodeRules, placed: Placed | None = None) -> None:
        self.state, self.config, self.book, self.timers = state, config, book, timers
        self.nodes = nodes
        self.placements = Placements(placed, book.limits.counts)  # checked only with `placed`

    # -- events ------------------------------------------------------------------------

    def on_start(self, ev: WorkerStarted) -> None:
        found = self._worker(ev, start=True)
        if found is None or ev.hang_floor_s is None or ev.hang_floor_s == found[0].hang_floor_s:
            return
        job = found[0]
        job.hang_floor_s = ev.hang_floor_s
        job.threshold = threshold(job, self.config.hang)
        self.timers.arm(Timer.HANG, ev.job, job.last_progress + job.threshold)

    def on_step(self, ev: WorkerStepped) -> None:
        found = self._worker(ev)
        if found is None:
            return
        job, rank = found
        ts, step = ev.ts, ev.step
        if step > rank.step:
            rank.step, rank.step_ts = step, ts
        record_rank_step(rank.times, ev.step_time, self.config.straggler)
        if step > job.max_step:
            job.max_step = step
            job.last_progress = ts
            if job.first_step_ts is None:
                job.first_step_ts = ts
            record_step_time(job, ev.step_time, self.config.hang)
            self.timers.arm(Timer.HANG, ev.job, ts + job.threshold)
            if job.straggler_due is None:
                job.straggler_due = ts + self.config.straggler.check_s
                self.timers.arm(Timer.STRAGGLER, ev.job, job.straggler_due)
        if job.open_ids:
            self._progress(ev.job, job, ev)

    def on_error(self, ev: WorkerFailed) -> None:
        found = self._worker(ev)
        if found is None:
            return
        job, rank = found
        rank.errored = True
        category = classify_error(ev.error)
        self._clue(ev.job, job, category, CATEGORIES[category].specificity,
                   CATEGORIES[category].hold, ev, ev.error[:300] + last_words(ev.traceback, skip_last=True),
                   error_signature(category, ev.error))

    def on_exit(self, ev: WorkerExited) -> None:
        found = self._worker(ev, announces=True)
        if found is None:
            return
        job, rank = found
        leaving = (node := self.state.nodes.get(rank.node)) is not None and node.leaving
        if ev.stopped or leaving:  # stopped for a plan (a move, a grow) or as its node shuts down on purpose
            self._stopped(ev.job, job, ev.rank, ev.ts)
            return
        if ev.status_unknown:  # an adopted rank: not a fault, not the job's end; a peer's hang tells
            self._leave(ev.job, job, ev.rank, ev.ts)
            return
        if not ev.exit_code and ev.signal is None:
            job.finishing = True  # a clean exit: the job is ending, its silence is expected
            self._leave(ev.job, job, ev.rank, ev.ts)
            return
        how = f"signal {ev.signal}" if ev.signal is not None else f"code {ev.exit_code}"
        signature = f"process_exit: {how}"
        said = last_words(ev.output_tail)
        rank.exited = True
        if rank.errored:  # exiting after its own error: fallout, not a root cause
            self._clue(ev.job, job, "process_exit", CONSEQUENCE_SPECIFICITY, Hold.SYMPTOM, ev,
                       f"exited with {how} after its error{said}", signature)
        else:
            self._clue(ev.job, job, "process_exit", CATEGORIES["process_exit"].specificity,
                       Hold.EVIDENCE, ev, f"exited with {how}{said}", signature)
        self._settle(ev.job, job, ev.ts)

    def first_failure(self, ev: WorkerFailed | WorkerExited) -> bool:
        """Whether `ev` is its rank's first report of a failure at its job's current generation, from the
        node the rank runs on: an error, or an exit that is not a clean end, a planned stop (its node's
        shutdown too) or an adopted rank's. What may settle a group (`settle`); the live ordering lets
        it wait less (streams/ordering.py). A rank's later reports, and a job's this detector never
        placed, do not."""
        job = self.state.jobs.get(ev.job)
        rank = job.ranks.get(ev.rank) if job is not None and job.gen == ev.generation else None
        if rank is None or rank.node != ev.node or rank.errored or rank.exited:
            return False
        if not isinstance(ev, EXITS):  # an error
            return True
        node = self.state.nodes.get(rank.node)
        return not (ev.stopped or ev.status_unknown or (not ev.exit_code and ev.signal is None)
                    or node is not None and node.leaving)

    # -- timers ------------------------------------------------------------------------

    def release(self, name: str, when: float) -> None:
        """A group's hold is over, or every rank has reported (`settle`): decide, unless a node of
        the job is overdue (then wait until it is heard from or declared lost, which absorbs the
        group) or, settled early, a GPU's sample is late (then wait out the hold)."""
        job = self.state.jobs.get(name)
        group = job.group if job else None
        if group is None:
            return
        if group.release > when:
            self.timers.arm(Timer.RELEASE, name, group.release)
            return
        wait = held_until(self.state, self.config, job, when)
        if wait is not None and wait > when:
            group.release = wait
            self.timers.arm(Timer.RELEASE, name, wait)
            return
        decide(self.book, name, job, when)
        self._settle(name, job, when)

    def node_lost(self, name: str, when: float) -> None:
        """Node `name` may just have been declared lost: its jobs with no other rank running are over."""
        node = self.state.nodes.get(name)
        if node is not None and node.lost_since is not None:
            for job_name in list(node.jobs):
                if (job := self.state.jobs.get(job_name)) is not None:
                    self._settle(job_name, job, when)

    def check_hang(self, name: str, when: float) -> None:
        job = self.state.jobs.get(name)
        if job is None or job.finishing or job.fatal_id is not None or not job.ranks:
            return  # re-armed by the job's next step or generation
        if job.group is not None:  # look again once the pending failure is decided
            self.timers.arm(Timer.HANG, name, job.group.release)
            return
        due = job.last_progress + job.threshold
        if due > when:
            self.timers.arm(Timer.HANG, name, due)
            return
        wait = overdue_until(self.state, self.config, job, when)
        if wait is not None and wait > when:  # a silent host is node_lost's to report
            self.timers.arm(Timer.HANG, name, wait)
            return
        first, low, high = stopped_first(job)
        blame = first if len(first) < len(job.ranks) or len(job.ranks) == 1 else []
        hosts = {job.ranks[r].node for r in blame}
        lines = [f"{when:.3f} no step from job {name} since {job.last_progress:.3f} "
                 f"({describe_threshold(job, self.config.hang)})"]
        if blame:
            lines.append(f"ranks {blame} stopped first, at step {low}; others reached {high}")
        else:
            lines.append(f"all {len(job.ranks)} ranks stopped at step {high}")
        rec = self.book.open(
            "hang", key=f"{job.gen}|{job.max_step}", root_ts=job.last_progress, ts=when,
            first_ts=job.last_progress, job=name, node=hosts.pop() if len(hosts) == 1 else None,
            ranks=blame, evidence=lines, jobs={name: job.gen}, step=job.max_step,
            signature="hang")
        job.open_ids.append(rec.id)
        job.fatal_id = rec.id

    def check_stragglers(self, name: str, when: float) -> None:
        job = self.state.jobs.get(name)
        if job is None:
            return
        cfg = self.config.straggler
        if job.finishing or job.fatal_id is not None or job.last_progress <= when - cfg.check_s:
            job.straggler_due = None  # idle or failed: the next step re-arms the check
            return
        job.straggler_due = when + cfg.check_s
        self.timers.arm(Timer.STRAGGLER, name, job.straggler_due)
        found = rank_medians(job, cfg)
        if found is None:
            return
        medians, typical = found
        for r, mine in medians.items():
            rank = job.ranks[r]
            rec = self.book.get(rank.straggler_id)
            if mine > cfg.ratio * typical:
                rank.slow_checks += 1
                if rec is None and rank.slow_checks >= cfg.sustain_checks:
                    first = when - (cfg.sustain_checks - 1) * cfg.check_s
                    rec = self.book.open(
                        "straggler", key=f"{job.gen}|{r}", root_ts=first, ts=when,
                        first_ts=first, job=name, node=rank.node, ranks=[r],
                        evidence=[f"{when:.3f} rank {r} on {rank.node}: median step "
                                  f"{mine:.3f}s vs job median {typical:.3f}s, "
                                  f"{rank.slow_checks} checks in a row"])
                    rank.straggler_id = rec.id
            else:
                rank.slow_checks = 0
                if rec is not None:
                    rank.straggler_id = None
                    self.book.resolve(rec, when, f"rank {r} median step {mine:.3f}s vs "
                                                 f"job median {typical:.3f}s")

    def drain(self) -> None:
        """End of input: decide every pending group at its release time."""
        pending = sorted((job.group.release, name) for name, job in self.state.jobs.items()
                         if job.group is not None)
        for release, name in pending:
            decide(self.book, name, self.state.jobs[name], release)

    # -- membership and generations ----------------------------------------------------

    def _worker(self, ev: WorkerEvent, start: bool = False,
                announces: bool = False) -> tuple[JobWatch, RankState] | None:
        """The job and rank of a worker event, placing the rank on its node; None for an event of a
        generation that ended or older (a fenced-off process), of a newer one that no `worker_start` within
        GENERATION_JUMP announced, of a new job past the cap on jobs never seen started, or of one job
        too many on its node (limits.py), or, with the coordinator's keys, not placed (placement.py).
        `announces`: the event comes from the executor that launched its generation (a `worker_exit`),
        so it announces a newer one as a `worker_start` does: a rank that dies before its hook starts
        (a script broken at import) is still seen."""
        job = self.state.jobs.get(ev.job)
        if refused(self.state, ev.job, ev.generation, start):
            return None
        placing = self.placements.placed is not None and self.placements.placing(job, ev, start or announces)
        if placing is None or (start or job is None) and self.book.limits.crowded(ev):
            return None
        if job is None:
            if not start and sum(not j.started for j in self.state.jobs.values()) >= UNSTARTED_JOBS:
                return None
            job = self.state.jobs[ev.job] = JobWatch(gen=ev.generation, last_progress=ev.ts,
                                                     started=start, threshold=self.config.hang.warmup_s,
                                                     placed=None if self.placements.placed is None else {})
            self.timers.arm(Timer.HANG, ev.job, ev.ts + job.threshold)
            self.state.ended.pop(ev.job, None)
        elif job.finishing and not job.ranks and start and ev.generation == job.gen:
            self._new_generation(ev.job, job, ev)  # over at this generation: the id submitted again
        elif ev.generation != job.gen:
            newer = start or announces
            leap = ev.generation - job.gen > GENERATION_JUMP and not placing  # a signed placement: no cap
            if ev.generation < job.gen or not newer or leap:
                return None
            self._new_generation(ev.job, job, ev)
        if start:
            job.started = True
        if placing and job.placed is not None:
            job.placed[ev.node] = self.placements.ranks(ev)
        self.nodes.known(ev.node, ev.ts)
        rank = job.ranks.get(ev.rank)
        if rank is None or rank.node != ev.node:
            rank = self._place(ev.job, job, ev, rank)
        return job, rank

    def _place(self, name: str, job: JobWatch, ev: WorkerEvent, rank: RankState | None
               ) -> RankState:
        if rank is None:
            rank = job.ranks[ev.rank] = RankState(ev.node)
        else:
            self._unlist(name, rank.node, ev.rank)
            rank.node = ev.node
        node = self.state.nodes[ev.node]
        ranks = node.jobs.setdefault(name, [])
        if ev.rank not in ranks:
            ranks.append(ev.rank)
            ranks.sort()
        return rank

    def _unlist(self, name: str, node_name: str, rank_no: int) -> None:
        node = self.state.nodes.get(node_name)
        ranks = node.jobs.get(name) if node else None
        if ranks and rank_no in ranks:
            ranks.remove(rank_no)
            if not ranks:
                del node.jobs[name]

    def _leave(self, name: str, job: JobWatch, rank_no: int, ts: float) -> None:
        rank = job.ranks.pop(rank_no)
        self._unlist(name, rank.node, rank_no)
        self._clear_straggler(rank, ts, "rank exited")
        if not job.ranks:
            self._end(name, job, ts)
        else:
            self._settle(name, job, ts)

    def _stopped(self, name: str, job: JobWatch, rank_no: int, ts: float) -> None:
        """A planned stop: the rank leaves; once none is left the job is quiet by intent until its
        next generation (its open incidents resolve as before, when that generation steps). Evidence
        still held then is the plan's fallout: a rank stopped first resets its peers' connections
        before their own stop reaches them. A failure of that generation's own would have left a
        rank that exited by itself, which keeps the evidence; a bug recurs in the next generation."""
        rank = job.ranks.pop(rank_no)
        self._unlist(name, rank.node, rank_no)
        self._clear_straggler(rank, ts, "rank stopped by its executor")
        if not job.ranks:
            job.finishing = True
            job.group = None
        self._settle(name, job, ts)

    def _settle(self, name: str, job: JobWatch, ts: float) -> None:
        """Once the job is over at its generation (`job_end.over`), forget it on its nodes and refuse
        its later reports of that generation: quiet by intent until a newer one starts."""
        if self.state.ended.get(name) == job.gen or not over(self.state, job):
            return
        for r, rank in job.ranks.items():
            self._unlist(name, rank.node, r)
            self._clear_straggler(rank, ts, "its job is over")
        job.ranks, job.finishing = {}, True
        note_ended(self.state, name, job.gen)

    def _end(self, name: str, job: JobWatch, ts: float) -> None:
        """Every rank exited: decide what is pending, clear what the job's steps would."""
        if job.group is not None:
            decide(self.book, name, job, job.group.release)
        for iid in job.open_ids:
            rec = self.book.get(iid)
            if rec is not None:
                rec.jobs.pop(name, None)
                if not rec.jobs and jobs_resolve(rec.category):
                    self.book.resolve(rec, ts, f"job {name} ended")
        del self.state.jobs[name]
        note_ended(self.state, name, job.gen)

    def _new_generation(self, name: str, job: JobWatch, ev: WorkerEvent) -> None:
        """The job was restarted: its ranks, progress and stragglers start afresh."""
        if job.group is not None:
            decide(self.book, name, job, min(job.group.release, ev.ts))
        for r, rank in job.ranks.items():
            self._unlist(name, rank.node, r)
            self._clear_straggler(rank, ev.ts, f"job restarted at generation {ev.generation}")
        self.state.ended.pop(name, None)
        job.placed = None if self.placements.placed is None else {}  # of the run before (placement.py)
        job.gen = ev.generation
        job.ranks = {}
        job.max_step, job.steps_seen, job.step_times, job.first_step_ts = -1, 0, [], None
        job.last_progress, job.threshold = ev.ts, threshold(job, self.config.hang)
        job.finishing, job.fatal_id = False, None
        self.timers.arm(Timer.HANG, name, ev.ts + job.threshold)

    def _clear_straggler(self, rank: RankState, ts: float, why: str) -> None:
        rec = self.book.get(rank.straggler_id)
        rank.straggler_id = None
        if rec is not None:
            self.book.resolve(rec, ts, why)

    # -- correlation -------------------------------------------------------------------

    def _clue(self, name: str, job: JobWatch, category: str, specificity: int, hold: Hold,
              ev: WorkerEvent, text: str, signature: str) -> None:
        clue = Clue(specificity, ev.ts, ev.rank, ev.node, category,
                    f"{ev.ts:.3f} rank {ev.rank} on {ev.node}: {text}", signature)
        if job.fatal_id is not None:  # this generation's failure is already decided
            owner = self.book.get(job.fatal_id)
            if owner is not None:
                self.book.note(owner, [clue.line])
            return
        cfg = self.config.correlation
        hold_s = cfg.evidence_hold_s if hold is Hold.EVIDENCE else cfg.symptom_hold_s
        release = add_clue(job, clue, hold_s, cfg.evidence_lines)
        if release is not None:
            self.timers.arm(Timer.RELEASE, name, release)
        settled = settle(self.state, self.config, job, ev.world_size, ev.ts)
        if settled is not None:  # fires once event time passes it: a report stamped the same is seen first
            self.timers.arm(Timer.RELEASE, name, settled)

    def _progress(self, name: str, job: JobWatch, ev: WorkerStepped) -> None:
        """The job steps: resolve what its recovery clears."""
        for iid in list(job.open_ids):
            rec = self.book.get(iid)
            opened_gen = rec.jobs.get(name) if rec is not None else None
            if opened_gen is None:
                job.open_ids.remove(iid)
                continue
            in_place = CATEGORIES[rec.category].resolves is Resolves.PROGRESS
            if ev.generation > opened_gen or (in_place and ev.step > rec.step):
                job.open_ids.remove(iid)
                del rec.jobs[name]
                if job.fatal_id == iid:
                    job.fatal_id = None
                if not rec.jobs and jobs_resolve(rec.category):
                    self._resolved_by_steps(rec, ev)

    def _resolved_by_steps(self, rec: OpenIncident, ev: WorkerStepped) -> None:
        node = self.state.nodes.get(rec.node) if rec.node else None
        if node is not None and node.hw_id == rec.id:
            node.hw_id = None
        self.book.resolve(rec, ev.ts, f"job {ev.job} steps again (step {ev.step}, "
                                      f"generation {ev.generation})")
