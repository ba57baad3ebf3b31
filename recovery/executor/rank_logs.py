"""The ranks' output files an executor writes (JOBS_DIR/JOB/SUBMISSION/logs/gGENERATION-rankRANK.log),
and reading them back on this machine, `[rank N]`-prefixed, for `trainmedic job logs` (docs/run.md).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from itertools import zip_longest
from pathlib import Path

from trainmedic.recovery.executor.job_dirs import LOGS, default_root

_NAME = re.compile(r"g(\d+)-rank(\d+)\.log")
MAX_LINE = 64 * 1024  # a rank's line longer than this is shown cut: a job's output never fills our memory


def log_name(generation: int, rank: int) -> str:
    """The file one rank of one generation writes its output to."""
    return f"g{generation}-rank{rank}.log"


@dataclass(frozen=True, order=True)
class RankLog:
    generation: int
    rank: int
    node: str
    path: Path


def job_logs_glob(home: Path, job: str) -> str:
    """Where the logs of `job` are looked for on this machine, for messages."""
    return str(default_root(home) / "*" / job / "*" / LOGS)


def find(home: Path, job: str, rank: int | None = None, submission: str | None = None) -> list[RankLog]:
    """The rank logs of one submission of `job` beside `home` (every node's executor of it), by
    generation and rank; only rank `rank`'s when given. The submission is `submission`, else the
    newest found (submissions are named by when they were submitted)."""
    found: dict[str, list[RankLog]] = {}
    for path in default_root(home).glob(f"*/{glob_escape(job)}/*/{LOGS}/g*-rank*.log"):
        match = _NAME.fullmatch(path.name)
        if match is not None:
            found.setdefault(path.parents[1].name, []).append(
                RankLog(int(match[1]), int(match[2]), path.parents[3].name, path))
    if submission is None:
        submission = max(found, default=None)
    return sorted(log for log in found.get(submission, []) if rank is None or log.rank == rank)


def glob_escape(name: str) -> str:
    return re.sub(r"([*?\[])", r"[\1]", name)


def interleaved(logs: Iterable[RankLog]) -> Iterator[str]:
    """Every line of `logs`, a generation at a time under a header, the ranks' lines taken in turn."""
    by_generation: dict[int, list[RankLog]] = {}
    for log in sorted(logs):
        by_generation.setdefault(log.generation, []).append(log)
    for generation, ranks in by_generation.items():
        yield header(generation, ranks)
        texts = [log.path.read_text(errors="replace").splitlines() for log in ranks]
        for lines in zip_longest(*texts):
            for log, line in zip(ranks, lines, strict=True):
                if line is not None:
                    yield f"[rank {log.rank}] {line}"


def header(generation: int, ranks: list[RankLog]) -> str:
    where = ", ".join(f"rank {log.rank} on {log.node}" for log in ranks)
    return f"== generation {generation}: {where} =="


@dataclass
class Tail:
    """What `tail -f` does for a set of rank logs that grows: new files are read from their start,
    known ones from where the last read ended; only whole lines are returned."""

    offsets: dict[Path, int] = field(default_factory=dict)
    partial: dict[Path, tuple[int, bytes]] = field(default_factory=dict)  # path -> rank, a line's start

    def read(self, logs: Iterable[RankLog]) -> list[str]:
        lines = []
        for log in sorted(logs):
            if log.path not in self.offsets:
                self.offsets[log.path] = 0
                lines.append(header(log.generation, [log]))
            with log.path.open("rb") as f:
                f.seek(self.offsets[log.path])
                data = self.partial.pop(log.path, (log.rank, b""))[1] + f.read()
                self.offsets[log.path] = f.tell()
            *complete, rest = data.split(b"\n")
            if len(rest) > MAX_LINE:  # no newline yet: what is held stays bounded
                complete.append(rest[:MAX_LINE])
                rest = b""
            if rest:
                self.partial[log.path] = (log.rank, rest)
            lines += [f"[rank {log.rank}] {line[:MAX_LINE].decode(errors='replace')}" for line in complete]
        return lines

    def rest(self) -> list[str]:
        """Last lines without a newline (a rank that ended mid-line), once following stops."""
        return [f"[rank {rank}] {line.decode(errors='replace')}" for rank, line in self.partial.values()]
