"""Fault injection for rehearsals and tests: a control file (TRAINMEDIC_DEMO_FAULTS or --fault-file),
re-read before every step, tells a rank to hang, die or crash (docs/executor.md, "The demo job and
fault injection").
"""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError

FAULTS_ENV = "TRAINMEDIC_DEMO_FAULTS"


class RankFault(BaseModel):
    """One fault armed for a rank of a training job (the control file's JSON object)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    fault: Literal["hang", "kill", "crash"]
    rank: int = Field(ge=0)
    at_step: int = Field(default=0, ge=0)
    generation: int | None = Field(default=None, ge=0)


_FAULTS = TypeAdapter(RankFault | list[RankFault])


def read_faults(path: Path | None) -> list[RankFault]:
    """The faults in the control file; none when it is absent, empty or not valid (a rehearsal
    typo must not kill the training job)."""
    if path is None:
        return []
    try:
        text = path.read_text("utf-8").strip()
        parsed = _FAULTS.validate_python(json.loads(text)) if text else []
    except (OSError, ValueError, ValidationError):
        return []
    return parsed if isinstance(parsed, list) else [parsed]


def due(faults: list[RankFault], *, rank: int, step: int, generation: int) -> RankFault | None:
    """The first fault that applies to this rank at this step and generation."""
    for fault in faults:
        if fault.rank == rank and step >= fault.at_step and fault.generation in (None, generation):
            return fault
    return None


def inject(fault: RankFault, *, step: int) -> None:
    """Carry the fault out. `hang` never returns (SIGTERM/SIGKILL still end the process)."""
    print(f"FAULT {fault.fault} injected at step {step}", flush=True)
    if fault.fault == "kill":
        os.kill(os.getpid(), signal.SIGKILL)
    if fault.fault == "crash":
        raise RuntimeError(f"injected crash at step {step}")
    while True:
        time.sleep(3600)
