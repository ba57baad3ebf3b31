"""What the recovery bench (bench/recovery_vs_torchrun.py) compares: the faults, the sides that
recover from them, what one recovery cost, and the bench's progress lines."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path

FAULTS = {  # name -> its row in the table
    "kill": "killed rank (kill -9)",
    "raise": "exception in a step",
    "hang": "hung rank",
    "node": "node lost, no spare",
    "node-spare": "node lost, a spare",
}
ON_TORCHRUN = ("kill", "raise", "hang")  # a lost node has no torchrun --standalone equivalent
SIDES = ("torchrun", "cold", "warm", "inproc")
MODES = ("cold", "warm", "inproc")  # trainmedic's sides
STARTED = time.monotonic()
USER_SCRIPT = Path(__file__).resolve().parents[1] / "user_train.py"  # `--script user`: python user_train.py


def say(text: str) -> None:
    print(f"[bench {time.monotonic() - STARTED:6.1f}s] {text}", flush=True)


@dataclass(frozen=True)
class Recovery:
    """One fault's cost: seconds from the injection to the first completed step after the restart,
    completed steps run again (both None when the job did not step again within the cap), and for
    trainmedic the seconds of each recovery phase."""

    time_to_step_s: float | None
    steps_lost: int | None
    phases: dict[str, float] = field(default_factory=dict)


Results = dict[str, list[Recovery]]  # fault -> its repeats
