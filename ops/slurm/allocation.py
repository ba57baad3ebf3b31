"""What a batch script learns from Slurm's environment (its allocation) and what it answers Slurm with
(its exit status). Pure: the environment is passed in."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from trainmedic.common.errors import ConfigError
from trainmedic.ops.slurm.hostlist import HostlistError, expand

SUCCEEDED = 0  # every rank of the last generation exited 0
FAILED = 1  # the job did not run to its end: stopped, rejected, or its nodes never came up
GAVE_UP = 3  # the coordinator gave up on it (its restarts spent): requeueing it as it is repeats that
STATUS = {"succeeded": SUCCEEDED, "failed": GAVE_UP}
EXIT_HELP = (f"exit status {SUCCEEDED}: the job succeeded; {GAVE_UP}: trainmedic gave up on it (its restarts "
             f"spent; list {GAVE_UP} in slurm.conf's RequeueExitHold to hold it for a person instead of "
             f"ending it); {FAILED}: it did not run to its end (stopped, rejected, nodes not up); 2: "
             "it could not start as asked")


def exit_status(state: str | None) -> int:
    """The batch script's exit status for the job's final state (`job_ended`'s)."""
    return STATUS.get(state or "", FAILED)


@dataclass(frozen=True)
class Allocation:
    """The Slurm job this runs in: its id, its nodes in Slurm's order, how often Slurm requeued it."""

    job_id: str
    nodes: tuple[str, ...]
    restarts: int = 0

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> Allocation:
        job_id, nodelist = env.get("SLURM_JOB_ID", ""), env.get("SLURM_JOB_NODELIST", "")
        if not job_id.isdigit() or not nodelist:
            raise ConfigError("no Slurm allocation here (SLURM_JOB_ID and SLURM_JOB_NODELIST unset): run "
                              "`trainmedic slurm run` in a batch script (`trainmedic slurm sbatch` writes "
                              "one), not on a login node")
        try:
            nodes = tuple(expand(nodelist))
        except HostlistError as err:
            raise ConfigError(f"SLURM_JOB_NODELIST: {err}") from None
        restarts = env.get("SLURM_RESTART_COUNT", "0")
        return cls(job_id, nodes, int(restarts) if restarts.isdigit() else 0)

    def split(self, spares: int) -> tuple[tuple[str, ...], tuple[str, ...]]:
        """(the job's nodes, the spares): the last `spares` nodes of the allocation wait as spares."""
        if not 0 <= spares < len(self.nodes):
            raise ConfigError(f"--spares {spares}: the allocation has {len(self.nodes)} nodes "
                              f"({','.join(self.nodes)}) and the job needs at least one")
        return self.nodes[: len(self.nodes) - spares], self.nodes[len(self.nodes) - spares:]

    def job_name(self, base: str) -> str:
        """The trainmedic job id of this Slurm job (and of each requeue of it): ids are used once."""
        return f"{base}-slurm{self.job_id}" + (f"-r{self.restarts}" if self.restarts else "")
