"""What the executor's ledger says: the commands it applied, the answers it sent, how far it read;
and the fold of one ledger line into it. Pure: the file itself is `recovery/executor/ledger.py`."""

from __future__ import annotations

from dataclasses import dataclass, field


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
    # job -> the generation its newest start or restart placed here, and that command's signed
    # placement (JSON)
    placements: dict[str, tuple[int, str]] = field(default_factory=dict)


def fold_entry(state: LedgerState, entry: dict) -> None:
    """Apply one ledger line (a processed offset, an applied command or a final answer) to `state`."""
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
        if isinstance(entry.get("placement"), str):
            state.placements[command.job] = (command.generation, entry["placement"])
        if entry.get("epoch") is not None:
            state.epoch = max(state.epoch if state.epoch is not None else 0, int(entry["epoch"]))
