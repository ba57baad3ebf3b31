"""The executor's local memory: which commands it applied and how far it read, fsync'd per line.

An append-only JSON-lines file under the state dir. A command id is written (and
fsync'd) *before* the command is applied, so a crash between the two loses the command
rather than applying it twice: at most once. Every processed offset is written too, so a
restarted executor resumes reading where it stopped.
"""

from __future__ import annotations

import json
import logging
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import TextIO

log = logging.getLogger(__name__)


@dataclass
class LedgerState:
    """What the ledger file says: applied ids, the newest applied generation per job, the newest
    coordinator epoch applied (None: no command carried one), positions."""

    applied: set[str] = field(default_factory=set)
    epoch: int | None = None
    generations: dict[str, int] = field(default_factory=dict)
    positions: dict[tuple[str, int], int] = field(default_factory=dict)  # (topic, partition) -> next offset


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
        job: str | None = None, generation: int | None = None, epoch: int | None = None,
        applied: bool = False,
    ) -> None:
        """Persist one processed message (and, with `applied`, that its command is being applied)."""
        entry = {"topic": topic, "partition": partition, "offset": offset, "applied": applied,
                 "command": command_id, "job": job, "generation": generation, "epoch": epoch}
        self._handle.write(json.dumps(entry, separators=(",", ":")) + "\n")
        self._handle.flush()
        os.fsync(self._handle.fileno())
        _fold(self.state, entry)

    def close(self) -> None:
        self._handle.close()


def _fold(state: LedgerState, entry: dict) -> None:
    where = (str(entry["topic"]), int(entry["partition"]))
    state.positions[where] = max(state.positions.get(where, 0), int(entry["offset"]) + 1)
    if entry.get("applied"):
        state.applied.add(str(entry["command"]))
        job, generation = str(entry["job"]), int(entry["generation"])
        state.generations[job] = max(state.generations.get(job, generation), generation)
        if entry.get("epoch") is not None:
            state.epoch = max(state.epoch if state.epoch is not None else 0, int(entry["epoch"]))
