"""A rank's failure as `trainmedic run` and `job status` show it: which rank, how it ended, and the last
lines it wrote (its `worker_exit`'s output tail), terminal-safe. Pure (docs/run.md)."""

from __future__ import annotations

import signal
from collections.abc import Iterable
from dataclasses import dataclass

from trainmedic.schemas.printable import terminal_safe
from trainmedic.schemas.telemetry import WorkerExited

SHOWN_LINES = 10  # of the tail, where a view shows its end


@dataclass(frozen=True)
class RankFailure:
    """A rank of a job that exited non-zero or by a signal on its own (not stopped, not unknown)."""

    generation: int
    rank: int
    node: str
    exit_code: int | None
    signal: int | None
    tail: tuple[str, ...]  # its last lines, terminal-safe; empty when unknown

    @property
    def how(self) -> str:
        """`exited with code 1`, or `was killed by signal 9 (SIGKILL)`."""
        if self.signal is None:
            return f"exited with code {self.exit_code}"
        try:
            name = f" ({signal.Signals(self.signal).name})"
        except ValueError:
            name = ""
        return f"was killed by signal {self.signal}{name}"

    def headline(self) -> str:
        """One line: the rank, how it ended and the last line it wrote, e.g. the exception."""
        said = f": {self.tail[-1].strip()}" if self.tail else ""
        return f"rank {self.rank} {self.how}{said}"

    def shown_tail(self, lines: int = SHOWN_LINES, indent: str = "    ") -> list[str]:
        return [f"{indent}{line}" for line in self.tail[-lines:]]


def rank_failure(event: object, job: str) -> RankFailure | None:
    """The failure `event` reports for `job`, if it is a `worker_exit` of a rank that failed."""
    if not isinstance(event, WorkerExited) or event.job != job or event.stopped or event.status_unknown:
        return None
    if event.exit_code == 0 or (event.exit_code is None and event.signal is None):
        return None
    tail = tuple(terminal_safe(line) for line in (event.output_tail or "").splitlines())
    return RankFailure(event.generation, event.rank, event.node, event.exit_code, event.signal, tail)


def last_failure(job: str, events: Iterable[object]) -> RankFailure | None:
    """The first failure of the newest generation of `job` that had one, among `events` in the order
    read: the peers' exits after it are usually its fallout."""
    found = None
    for event in events:
        failure = rank_failure(event, job)
        if failure is not None and (found is None or failure.generation > found.generation):
            found = failure
    return found
