"""What a restarted executor makes of its previous life: ranks to adopt, kill or report as ended, and the
answer to the command it was applying when it died; pure (docs/executor.md, "Restarts: adopting the
ranks").
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from trainmedic.recovery.executor.core.ledger_state import AppliedCommand, LedgerState, RecordedAck
from trainmedic.schemas import AckStatus, CommandAction


@dataclass(frozen=True, slots=True)
class RecordedRank:
    """One line of STATE_DIR/ranks.json: a rank process as the supervisor recorded it."""

    pid: int
    start: int | None  # the process start time (/proc/PID/stat field 22) when recorded
    job: str
    generation: int
    rank: int
    world_size: int

    @classmethod
    def of(cls, record: Mapping) -> RecordedRank:
        start = record.get("start")
        return cls(int(record["pid"]), None if start is None else int(start), str(record["job"]),
                   int(record.get("generation", 0)), int(record["rank"]), int(record.get("world_size", 1)))


@dataclass(frozen=True, slots=True)
class Leftovers:
    """The recorded ranks, sorted: still running and adoptable, still running but to be killed
    (with why), and ended while no executor watched."""

    adopt: tuple[RecordedRank, ...] = ()
    kill: tuple[tuple[RecordedRank, str], ...] = ()
    ended: tuple[RecordedRank, ...] = ()

    @property
    def running(self) -> set[tuple[str, int]]:
        """(job, generation) of the adopted ranks: what runs on this node now."""
        return {(rank.job, rank.generation) for rank in self.adopt}

    @property
    def launched(self) -> dict[tuple[str, int], set[int]]:
        """(job, generation) -> the ranks recorded for it: what a previous executor launched."""
        out: dict[tuple[str, int], set[int]] = {}
        for rank in (*self.adopt, *(r for r, _ in self.kill), *self.ended):
            out.setdefault((rank.job, rank.generation), set()).add(rank.rank)
        return out


def sort_leftovers(
    recorded: list[RecordedRank], starts: Mapping[int, int | None], ledger: LedgerState,
) -> Leftovers:
    """Sort `recorded` by `starts` (pid -> its start time now, None if gone) and the ledger.

    A rank is the same process only if its pid has the recorded start time, so a reused pid is
    never adopted nor killed. A live rank is adopted when its generation is the newest the ledger
    applied for its job and the job's last command was not a stop.
    """
    adopt, kill, ended = [], [], []
    for rank in recorded:
        if rank.start is None or starts.get(rank.pid) != rank.start:
            ended.append(rank)
            continue
        why = _not_adoptable(rank, ledger)
        if why is None:
            adopt.append(rank)
        else:
            kill.append((rank, why))
    return Leftovers(tuple(adopt), tuple(kill), tuple(ended))


def _not_adoptable(rank: RecordedRank, ledger: LedgerState) -> str | None:
    generation = ledger.generations.get(rank.job)
    if generation is None:
        return f"the ledger has no command for job {rank.job}"
    if rank.generation != generation:
        return f"generation {rank.generation} was superseded by generation {generation}"
    last = ledger.last.get(rank.job)
    if last is not None and last.action == CommandAction.STOP:
        return f"command {last.id} stops job {rank.job}"
    return None


def interrupted_answer(command: AppliedCommand, launched: Mapping[tuple[str, int], set[int]]) -> RecordedAck:
    """The answer to `command`, applied (in the ledger) but not answered when the executor died.

    `launched` holds the ranks recorded per (job, generation): a start or restart all of whose
    ranks were recorded was carried out; one with fewer was not, and is not applied again (at
    most once). A stop was finished by the restart itself (its ranks are killed as not
    adoptable). A reattempt may or may not have signalled the ranks, so it failed.
    """
    if command.action in (CommandAction.START, CommandAction.RESTART):
        found = launched.get((command.job, command.generation), set())
        missing = set(command.ranks or ()) - found  # a ledger without ranks: any recorded will do
        if found and not missing:
            return RecordedAck(AckStatus.DONE, f"generation {command.generation} was launched before the "
                                               f"executor restarted")
        what = f"ranks {sorted(missing)} of generation {command.generation} were" if found else (
            f"generation {command.generation} was")
        return RecordedAck(AckStatus.FAILED, f"interrupted: the executor restarted before {what} launched; "
                                             f"not applied again")
    if command.action == CommandAction.STOP:
        return RecordedAck(AckStatus.DONE, "the executor restarted while stopping; it killed the ranks left")
    return RecordedAck(AckStatus.FAILED, f"interrupted: the executor restarted while applying "
                                         f"{command.action or 'the command'}; not applied again")


def unanswered(ledger: LedgerState) -> AppliedCommand | None:
    """The command a crash interrupted: the newest applied one, if it has no recorded answer.

    Only the newest can be: commands are applied one at a time. Older unanswered ones come from
    a ledger written before answers were recorded; they were answered then.
    """
    newest = ledger.newest
    return newest if newest is not None and newest.id not in ledger.answers else None
