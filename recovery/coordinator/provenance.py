"""Which command records the coordinator folds: only those signed by its own keys.

The coordinator re-sends unanswered commands from what it folded, signing each re-send. A
command record it did not sign (a forged copy of one of its commands, naming another node
or argv) must therefore never reach the fold: the service dead-letters it instead. With no
keys (insecure) every command record is folded.
"""

from __future__ import annotations

from bus.message import Record
from recovery.signing import TrustedKeys


def foreign(record: Record, commands_topic: str, trusted: TrustedKeys | None) -> str | None:
    """Why `record` is a command record this coordinator did not sign; None when it may be folded."""
    if trusted is None or record.topic != commands_topic:
        return None
    why = trusted.check(record.value)
    return None if why is None else f"command record not signed by this coordinator, never re-sent: {why}"
