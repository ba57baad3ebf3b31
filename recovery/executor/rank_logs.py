"""The ranks' output files an executor writes (JOBS_DIR/JOB/SUBMISSION/logs/gGENERATION-rankRANK.log),
and reading them back on this machine, `[rank N]`-prefixed, for `trainmedic job logs` and the tee of
`trainmedic run` (docs/run.md). A rank may replace its log with a link to a secret or a FIFO: a log is
opened without following a link or blocking, and read only when it is a regular file; its lines are
cut at MAX_LINE bytes.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import stat
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from itertools import zip_longest
from pathlib import Path
from typing import BinaryIO

from trainmedic.recovery.executor.job_dirs import LOGS, default_root

log = logging.getLogger(__name__)

_NAME = re.compile(r"g(\d+)-rank(\d+)\.log")
MAX_LINE = 16 * 1024  # a rank's line longer than this is shown cut: a job's output never fills our memory
READ_AT_MOST = 1 << 20  # what one follow step reads of one log, at most


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
        with contextlib.ExitStack() as files:
            texts = [_lines(files.enter_context(opened)) for opened in map(open_log, ranks)]
            for lines in zip_longest(*texts):
                for log, line in zip(ranks, lines, strict=True):
                    if line is not None:
                        yield f"[rank {log.rank}] {line}"


def open_log(log: RankLog) -> contextlib.AbstractContextManager[BinaryIO | None]:
    """`log` opened for reading when it is a regular file (never through a link, never blocking on
    a FIFO); else None, said in the log."""
    try:
        fd = os.open(log.path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError as err:
        log_warning(log, str(err))
        return contextlib.nullcontext()
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        log_warning(log, "not a regular file")
        return contextlib.nullcontext()
    return os.fdopen(fd, "rb")


def log_warning(found: RankLog, why: str) -> None:
    log.warning("rank %d's log %s is not read: %s", found.rank, found.path, why)


def _lines(file: BinaryIO | None) -> Iterator[str]:
    """The file's lines, each cut at MAX_LINE bytes (saying how much more it had), decoded."""
    if file is None:
        return
    while line := file.readline(MAX_LINE):
        more = 0
        if len(line) == MAX_LINE and not line.endswith(b"\n"):
            while rest := file.readline(MAX_LINE):  # the rest of a long line, counted, not kept
                more += len(rest.removesuffix(b"\n"))
                if rest.endswith(b"\n"):
                    break
        yield cut(line, more) if more else line.removesuffix(b"\n").decode(errors="replace")


def cut(line: bytes, more: int) -> str:
    """A line shown cut, saying by how much."""
    return f"{line.decode(errors='replace')} [cut: {more} more bytes]"


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
            with open_log(log) as f:
                if f is None:
                    continue
                f.seek(self.offsets[log.path])
                data = self.partial.pop(log.path, (log.rank, b""))[1] + f.read(READ_AT_MOST)
                self.offsets[log.path] = f.tell()
            *complete, rest = data.split(b"\n")
            if len(rest) > MAX_LINE:  # no newline yet: what is held stays bounded
                complete.append(rest)
                rest = b""
            if rest:
                self.partial[log.path] = (log.rank, rest)
            lines += [f"[rank {log.rank}] {_shown(line)}" for line in complete]
        return lines

    def rest(self) -> list[str]:
        """Last lines without a newline (a rank that ended mid-line), once following stops."""
        return [f"[rank {rank}] {_shown(line)}" for rank, line in self.partial.values()]


def _shown(line: bytes) -> str:
    return line.decode(errors="replace") if len(line) <= MAX_LINE else cut(line[:MAX_LINE],
                                                                             len(line) - MAX_LINE)
