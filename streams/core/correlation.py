"""One fault, one incident: job evidence waits briefly in a group for its root cause
(docs/detection.md, "Correlation: one fault, one incident").
"""

from __future__ import annotations

from bisect import insort

from trainmedic.streams.core.config import DetectorConfig
from trainmedic.streams.core.incidents import IncidentBook
from trainmedic.streams.core.state import Clue, DetectorState, Group, JobWatch, NodeState, OpenIncident
from trainmedic.streams.core.taxonomy import CATEGORIES, Resolves


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


def affected(state: DetectorState, node: NodeState) -> tuple[str | None, list[int], dict[str, int],
                                                             list[str]]:
    """Who a fault on this node hits: (the job if exactly one, its ranks here, job -> generation,
    evidence lines naming every job and its ranks)."""
    jobs = {name: state.jobs[name].gen for name in node.jobs if name in state.jobs}
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
