"""The executor's local memory: which commands it applied (each id fsync'd before it is applied: at most
once), their final answers, and how far it read (docs/executor.md, "Fencing and at-most-once").
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path
from typing import TextIO

from trainmedic.recovery.executor.core.ledger_state import LedgerState, RecordedAck, fold_entry

log = logging.getLogger(__name__)


class Ledger:
    """Append-only record of processed commands. Open with `Ledger.open(path)`."""

    def __init__(self, path: Path, state: LedgerState, handle: TextIO) -> None:
        self.path = path
        self.state = state
        self._handle = handle

    @classmethod
    def open(cls, path: Path) -> Ledger:
        """Read what is there (skipping a torn last line), then open for appending. Ledgers of an
        older version hold no answer lines: a command they applied is then skipped without an ack.
        An executor of an older version skips the answer lines as unreadable, with a warning, so a
        rollback still reads the ledger."""
        path.parent.mkdir(parents=True, exist_ok=True)
        state = LedgerState()
        if path.exists():
            for number, line in enumerate(path.read_text("utf-8").splitlines(), 1):
                try:
                    fold_entry(state, json.loads(line))
                except (ValueError, KeyError, TypeError) as err:
                    log.warning("%s:%d: unreadable ledger line skipped (%s)", path, number, err)
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        os.fchmod(fd, 0o600)  # the executor's only; an older version made it 0644
        return cls(path, state, os.fdopen(fd, "a", encoding="utf-8"))

    def record(
        self, *, topic: str, partition: int, offset: int, command_id: str | None = None,
        job: str | None = None, generation: int | None = None, applied: bool = False,
        action: str | None = None, ranks: tuple[int, ...] | None = None, epoch: int | None = None,
        placement: str | None = None,
    ) -> None:
        """Persist one processed message (and, with `applied`, that its command is being applied;
        `placement`: a start's or restart's signed placement as JSON, which its adopted ranks' reports
        carry)."""
        entry = {"topic": topic, "partition": partition, "offset": offset, "applied": applied,
                 "command": command_id, "job": job, "generation": generation, "action": action,
                 "ranks": None if ranks is None else list(ranks), "epoch": epoch}
        if placement is not None:
            entry["placement"] = placement
        self._write(entry)

    def record_answer(self, command_id: str, answer: RecordedAck) -> None:
        """Persist the final ack of an applied command, before it is sent."""
        self._write({"command": command_id, "answer": {"status": answer.status, "reason": answer.reason,
                                                       "elapsed_s": answer.elapsed_s}})

    def _write(self, entry: dict) -> None:
        self._handle.write(json.dumps(entry, separators=(",", ":")) + "\n")
        self._handle.flush()
        os.fsync(self._handle.fileno())
        fold_entry(self.state, entry)

    def close(self) -> None:
        self._handle.close()
