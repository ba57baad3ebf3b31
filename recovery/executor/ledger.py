"""The executor's local memory: which commands it applied and how far it read, fsync'd per line.

An append-only JSON-lines file under the state dir. A command id is written (and
fsync'd) *before* the command is applied, so a crash between the two loses the command
rather than applying it twice: at most once. Every processed offset is written too, so a
restarted executor resumes reading where it stopped. The final ack of an applied command
(done or failed) is written before it is sent, so a redelivered command is answered with it.
An executor of an older version skips answer lines as unreadable, with a warning.
"""

from __future__ import annotations

import json
import logging
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import TextIO

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class AppliedCommand:
    """A command this executor applied: what it did to which job at which generation."""

    id: str
    job: str
    generation: int
    action: str | None  # None in ledgers written before actions were recorded
    ranks: tuple[int, ...] | None = None  # the ranks a start or restart launches (None: not recorded)


@dataclass(frozen=True, slots=True)
class RecordedAck:
    """The final answer (done or failed) sent for an applied command, to be sent again on redelivery."""

    status: str
    reason: str | None = None
    elapsed_s: float | None = None


@dataclass
class LedgerState:
    """What the ledger file says: applied ids, the newest applied generation per job, positions,
    the last command applied for each job, the final answers sent, and the newest coordinator
    epoch applied (None: no command carried one)."""

    applied: set[str] = field(default_factory=set)
    epoch: int | None = None
    generations: dict[str, int] = field(default_factory=dict)
    positions: dict[tuple[str, int], int] = field(default_factory=dict)  # (topic, partition) -> next offset
    last: dict[str, AppliedCommand] = field(default_factory=dict)  # job -> its newest applied command
    newest: AppliedCommand | None = None  # the command applied last: the one a crash can interrupt
    answers: dict[str, RecordedAck] = field(default_factory=dict)  # command id -> its final ack


class Ledger:
    """Append-only record of processed commands. Open with `Ledger.open(path)`."""

    def __init__(self, path: Path, state: LedgerState, handle: TextIO) -> None:
        self.path = path
        self.state = state
        self._handle = handle

    @classmethod
    def open(cls, path: Path) -> Ledger:
        """Read what is there (skipping a torn last line), then open for appending."""
        path.parent.mkdir(parents=True, exist_ok=True)
        state = LedgerState()
        if path.exists():
            for number, line in enumerate(path.read_text("utf-8").splitlines(), 1):
                try:
                    _fold(state, json.loads(line))
                except (ValueError, KeyError, TypeError) as err:
                    log.warning("%s:%d: unreadable ledger line skipped (%s)", path, number, err)
        return cls(path, state, path.open("a", encoding="utf-8"))

    def record(
        self, *, topic: str, partition: int, offset: int, command_id: str | None = None,
        job: str | None = None, generation: int | None = None, applied: bool = False,
        action: str | None = None, ranks: tuple[int, ...] | None = None, epoch: int | None = None,
    ) -> None:
        """Persist one processed message (and, with `applied`, that its command is being applied)."""
        self._write({"topic": topic, "partition": partition, "offset": offset, "applied": applied,
                     "command": command_id, "job": job, "generation": generation, "action": action,
                     "ranks": None if ranks is None else list(ranks), "epoch": epoch})

    def record_answer(self, command_id: str, answer: RecordedAck) -> None:
        """Persist the final ack of an applied command, before it is sent."""
        self._write({"command": command_id, "answer": {"status": answer.status, "reason": answer.reason,
                                                       "elapsed_s": answer.elapsed_s}})

    def _write(self, entry: dict) -> None:
        self._handle.write(json.dumps(entry, separators=(",", ":")) + "\n")
        self._handle.flush()
        os.fsync(self._handle.fileno())
        _fold(self.state, entry)

    def close(self) -> None:
        self._handle.close()


def _fold(state: LedgerState, entry: dict) -> None:
    if "answer" in entry:
        answer = entry["answer"]
        elapsed = answer.get("elapsed_s")
        state.answers[str(entry["command"])] = RecordedAck(
            str(answer["status"]), answer.get("reason"), None if elapsed is None else float(elapsed))
        return
    where = (str(entry["topic"]), int(entry["partition"]))
    state.positions[where] = max(state.positions.get(where, 0), int(entry["offset"]) + 1)
    if entry.get("applied"):
        ranks = entry.get("ranks")
        command = AppliedCommand(str(entry["command"]), str(entry["job"]), int(entry["generation"]),
                                 entry.get("action"), None if ranks is None else tuple(int(r) for r in ranks))
        state.applied.add(command.id)
        state.generations[command.job] = max(state.generations.get(command.job, command.generation),
                                             command.generation)
        state.last[command.job] = state.newest = command
        if entry.get("epoch") is not None:
            state.epoch = max(state.epoch if state.epoch is not None else 0, int(entry["epoch"]))
