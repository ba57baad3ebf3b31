"""What the batch script reads of its allocation and the exit status it gives Slurm."""

from __future__ import annotations

import pytest

from trainmedic.common.errors import ConfigError
from trainmedic.ops.slurm.allocation import FAILED, GAVE_UP, SUCCEEDED, Allocation, exit_status

ENV = {"SLURM_JOB_ID": "4242", "SLURM_JOB_NODELIST": "gpu[01-04]"}


def test_the_allocation_is_read_from_slurms_environment() -> None:
    allocation = Allocation.from_env(ENV)
    assert allocation == Allocation("4242", ("gpu01", "gpu02", "gpu03", "gpu04"), 0)
    assert allocation.split(1) == (("gpu01", "gpu02", "gpu03"), ("gpu04",))
    assert allocation.split(0) == (allocation.nodes, ())
    assert allocation.job_name("llm") == "llm-slurm4242"
    assert Allocation.from_env({**ENV, "SLURM_RESTART_COUNT": "2"}).job_name("llm") == "llm-slurm4242-r2"


@pytest.mark.parametrize("env", [{}, {"SLURM_JOB_ID": "1"}, {**ENV, "SLURM_JOB_ID": "x"},
                                 {**ENV, "SLURM_JOB_NODELIST": "gpu[01-"}])
def test_no_allocation_or_a_broken_one_says_what_to_do(env: dict[str, str]) -> None:
    with pytest.raises(ConfigError, match="SLURM_JOB_NODELIST|batch script"):
        Allocation.from_env(env)


@pytest.mark.parametrize("spares", [-1, 4, 5])
def test_spares_leave_the_job_at_least_one_node(spares: int) -> None:
    with pytest.raises(ConfigError, match="--spares"):
        Allocation.from_env(ENV).split(spares)


def test_the_exit_status_tells_a_given_up_job_from_one_that_did_not_run_to_its_end() -> None:
    assert exit_status("succeeded") == SUCCEEDED == 0
    assert exit_status("failed") == GAVE_UP == 3  # job_ended failed: the coordinator gave up on it
    assert {exit_status(state) for state in ("stopped", "rejected", None)} == {FAILED}
