"""The demo's rank faults armed ahead: what the training script reads back from the fault file."""

from __future__ import annotations

from pathlib import Path

import pytest

from trainmedic.demo.faults import arm_rank_fault
from trainmedic.demo.timeline import Timeline
from trainmedic.runtime.faults import due, inject, read_faults


@pytest.mark.parametrize("kind", ["hang", "crash"])
def test_an_armed_fault_is_due_for_its_rank_from_its_step_in_its_generation_only(tmp_path: Path, kind: str):
    timeline = Timeline("job")
    timeline.stepped(2, 4, 40, 100.0)
    arm_rank_fault(tmp_path / "faults.json", timeline, kind, rank=3)
    faults = read_faults(tmp_path / "faults.json")
    assert [(f.fault, f.rank, f.at_step, f.generation) for f in faults] == [(kind, 3, 43, 2)]
    assert due(faults, rank=3, step=42, generation=2) is None
    assert due(faults, rank=1, step=43, generation=2) is None
    assert due(faults, rank=3, step=43, generation=2) == faults[0]
    assert due(faults, rank=3, step=50, generation=3) is None  # the restarted job does not fault again


def test_an_armed_crash_raises_in_the_training_step(tmp_path: Path):
    timeline = Timeline("job")
    timeline.stepped(0, 2, 7, 100.0)
    arm_rank_fault(tmp_path / "faults.json", timeline, "crash", rank=1, steps_ahead=1)
    fault = due(read_faults(tmp_path / "faults.json"), rank=1, step=8, generation=0)
    with pytest.raises(RuntimeError, match="injected crash at step 8"):
        inject(fault, step=8)
