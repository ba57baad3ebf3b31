"""One fault, one incident: job evidence waits briefly in a group for its root cause
(docs/detection.md, "Correlation: one fault, one incident").
"""

from __future__ import annotations

import signal
from bisect import bisect_left, insort

from trainmedic.streams.core.config import DetectorConfig
from trainmedic.streams.core.incidents import IncidentBook
from trainmedic.streams.core.job_end import over
from trainmedic.streams.core.state import Clue, DetectorState, Group, JobWatch, NodeState, OpenIncident
from trainmedic.streams.core.taxonomy import CATEGORIES, Resolves

# A GPU's next sample is due within this many sample intervals of its last: samples are taken on a fixed
# grid (producers/loop.py), woken late by milliseconds. (NVML and synthetic sources send an Xid at once,
# off the grid, but dcgm-exporter's come only with a scrape: the wait for the grid's sample stays.)
SAMPLE_DUE = 1.1
# Root causes that no later report refines once every rank has reported (`settle`). A CUDA error keeps
# its hold (a GPU's Xid can follow it), and so do symptoms (collective and network errors: the fault may
# be elsewhere).
SETTLES = frozenset({"software_error", "process_exit"})
BY_SIGNAL = "process_exit: signal"  # how an exit by a signal's signature begins (job_rules.on_exit)
KILLED = f"{BY_SIGNAL} {int(signal.SIGKILL)}"  # the kernel's OOM killer, or a person: no GPU's, no network's


def add_clue(job: JobWatch, clue: Clue, hold_s: float, max_lines: int) -> float | None:
    """Put evidence into the job's group; return the release time if it became earlier."""
    group = job.group
    if group is None:
        job.group = Group(first_ts=clue.ts, release=clue.ts + hold_s, best=clue,
                          ranks=[clue.rank] if clue.rank >= 0 else [], lines=[clue.line])
        return job.group.release
    if clue < group.best:
        group.best = clue
    if clue.ts < group.first_ts:
        group.first_ts = clue.ts
    if clue.rank >= 0 and clue.rank not in group.ranks:
        insort(group.ranks, clue.rank)
    if len(group.lines) < max_lines:
        group.lines.append(clue.line)
    else:
        group.dropped += 1
    release = clue.ts + hold_s
    if release < group.release:
        group.release = release
        return release
    return None


def settle(state: DetectorState, cfg: DetectorConfig, job: JobWatch, world_size: int, now: float
           ) -> float | None:
    """Every rank of the job (0 .. world_size - 1) has reported, and its root cause so far is one that
    nothing later refines (SETTLES; exits only if no rank reported an error, which would be a symptom of
    a fault elsewhere): the group is due at `now`, or where `awaits_gpus` once the GPUs of its nodes have
    sent the sample that would carry a fault's Xid (`gpus_due`; one already late: the hold stands). The
    new release, if earlier."""
    group = job.group
    if (group.best.category not in SETTLES or bisect_left(group.ranks, world_size) < world_size
            or group.release < group.first_ts + cfg.correlation.evidence_hold_s):  # or settled already
        return None
    killed = group.best.signature == KILLED  # its peers' errors are what the kill did to them
    if group.best.category == "process_exit" and not killed and any(r.errored for r in job.ranks.values()):
        return None
    due = gpus_due(state, cfg, job, group.first_ts) if awaits_gpus(group.best) else None
    if due is not None and due <= now:
        return None
    release = now if due is None else due
    if release < group.release:
        group.release = release
        return release
    return None


def awaits_gpus(root: Clue) -> bool:
    """Whether a group whose root cause is `root` waits for its GPUs' next samples (a fault's Xid) before
    it settles: an exit by a signal may be a GPU fault's abort (a CUDA error in a C++ thread, a bus
    error), but not a SIGKILL, which no process sends itself; a software error names no CUDA error,
    and an exit with a code is the program's own end."""
    return root.category not in SETTLES or (root.signature.startswith(BY_SIGNAL) and root.signature != KILLED)


def gpus_due(state: DetectorState, cfg: DetectorConfig, job: JobWatch, since: float) -> float | None:
    """When every GPU of the job's nodes not heard from since `since` is due to have sent its next sample
    (SAMPLE_DUE intervals after its last); None when none is awaited."""
    latest = None
    due_s = SAMPLE_DUE * cfg.gpu.sample_interval_s
    for name in {rank.node for rank in job.ranks.values()}:
        node = state.nodes.get(name)
        for gpu in node.gpus.values() if node is not None else ():
            if not gpu.silent and gpu.last_ts < since and (latest is None or gpu.last_ts + due_s > latest):
                latest = gpu.last_ts + due_s
    return latest


def held_until(state: DetectorState, cfg: DetectorConfig, job: JobWatch, now: float) -> float | None:
    """How long a group due at `now` still waits (None: decide now): while a node or GPU of the job is
    overdue (`overdue_until`), and, settled early (`settle`) waiting for a GPU whose sample did not come
    in time, until the end of its evidence hold, as any group."""
    group = job.group
    hold_end = group.first_ts + cfg.correlation.evidence_hold_s
    late = None
    if now < hold_end and awaits_gpus(group.best) and gpus_due(state, cfg, job, group.first_ts) is not None:
        late = hold_end
    wait = overdue_until(state, cfg, job, now)
    return late if wait is None else wait if late is None else max(late, wait)


def affected(state: DetectorState, node: NodeState) -> tuple[str | None, list[int], dict[str, int],
                                                             list[str]]:
    """Who a fault on this node hits: (the job if exactly one, its ranks here, job -> generation,
    evidence lines naming every job and its ranks). Not a job over at its generation, every rank of it
    gone and its failure decided (`job_end.over`): a fault after that is not the job's."""
    jobs = {name: job.gen for name in node.jobs
            if (job := state.jobs.get(name)) is not None and not over(state, job, lost=False)}
    lines = [f"affects job {name} ranks {node.jobs[name]}" for name in sorted(jobs)]
    if len(jobs) == 1:
        (name,) = jobs
        return name, list(node.jobs[name]), jobs, lines
    return None, [], jobs, lines


def overdue_until(state: DetectorState, cfg: DetectorConfig, job: JobWatch, now: float
                  ) -> float | None:
    """If a node of the job has missed its promised heartbeat, or one of its GPUs its sample,
    but neither is declared lost yet: the latest time at which that will be decided. Else None.
    """
    latest = None
    gpu_overdue_s = 1.5 * cfg.gpu.sample_interval_s
    for name in {rank.node for rank in job.ranks.values()}:
        node = state.nodes.get(name)
        if node is None or node.interval is None or node.lost_since is not None:
            continue
        if node.gap_id is not None:  # its telemetry is missing, its ranks' steps too: wait
            candidate = now + cfg.heartbeat.timeout_s(node.interval)
        elif now - node.last_seen > node.interval:
            candidate = node.last_seen + cfg.heartbeat.timeout_s(node.interval)
        else:  # a silent GPU is decided at the first heartbeat after silence_s
            quiet = [gpu.last_ts for gpu in node.gpus.values()
                     if not gpu.silent and now - gpu.last_ts > gpu_overdue_s]
            if not quiet or len(quiet) == len(node.gpus):
                continue
            candidate = max(quiet) + cfg.gpu.silence_s + 1.5 * node.interval
        if candidate >= now and (latest is None or candidate > latest):
            latest = candidate
    return latest


def absorb_groups(state: DetectorState, jobs: dict[str, int]
                  ) -> tuple[float | None, list[str], int]:
    """Take the pending groups of these jobs: (their earliest evidence, lines, dropped count),
    to become evidence of a hardware incident about to open."""
    first, lines, dropped = None, [], 0
    for name in sorted(jobs):
        job = state.jobs[name]
        group = job.group
        if group is not None:
            job.group = None
            first = group.first_ts if first is None else min(first, group.first_ts)
            lines.extend(group.lines)
            dropped += group.dropped
    return first, lines, dropped


def own_generation(state: DetectorState, book: IncidentBook, rec: OpenIncident) -> None:
    """Make a hardware incident own the current generation of every job it names: their
    later failure evidence becomes its evidence, and their next generation's steps release them
    from it (they resolve it only where the node's own evidence is not what resolves it)."""
    clears_on_steps = CATEGORIES[rec.category].resolves in (Resolves.NEW_GENERATION, Resolves.NODE_HEALTHY)
    for name in rec.jobs:
        job = state.jobs[name]
        if book.get(job.fatal_id) is None:
            job.fatal_id = rec.id
        if clears_on_steps:
            job.open_ids.append(rec.id)


def decide(book: IncidentBook, name: str, job: JobWatch, ts: float) -> OpenIncident:
    """Turn the job's group into one incident: the best clue is the root cause. The failure of a
    job never seen started counts against no node (escalation): anyone can name a job."""
    group = job.group
    job.group = None
    root = group.best
    category = CATEGORIES[root.category]
    if root.category == "nccl_error":
        ranks = group.ranks
    elif root.rank >= 0:
        ranks = [root.rank]
    else:
        ranks = [r for r, rank in job.ranks.items() if rank.node == root.node]
    lines = [root.line] + [line for line in group.lines if line != root.line]
    rec = book.open(
        root.category, key=f"{root.rank}|{root.node}|{job.gen}", root_ts=root.ts, ts=ts,
        first_ts=group.first_ts, job=name, node=root.node if category.names_node else None,
        ranks=ranks, evidence=lines, dropped=group.dropped, jobs={name: job.gen},
        step=job.max_step, signature=root.signature, counts_node=job.started)
    job.open_ids.append(rec.id)
    if rec.severity in ("SEV1", "SEV2"):
        job.fatal_id = rec.id
    return rec
