"""The sbatch script `trainmedic slurm sbatch` writes: Slurm's options, then one `trainmedic slurm run`."""

from __future__ import annotations

import shlex
from collections.abc import Sequence
from pathlib import Path


def script(spec: Path, nodes: int, spares: int, run_args: Sequence[str], sbatch_args: Sequence[str],
           node_args: Sequence[str], trainmedic: Sequence[str]) -> str:
    """A batch script for `nodes` + `spares` nodes: `run_args` go to `trainmedic slurm run`, `node_args` to
    each node's `trainmedic node`, `sbatch_args` become #SBATCH lines."""
    lines = [
        "#!/bin/sh",
        "# Written by `trainmedic slurm sbatch` (docs/slurm.md). Submit it with sbatch.",
        f"#SBATCH --nodes={nodes + spares}",
        "#SBATCH --ntasks-per-node=1",
        "# Whole nodes: each node's trainmedic node is the only one there, and its steps get every GPU.",
        "#SBATCH --exclusive",
        "# A lost node ends its own step, not the allocation: trainmedic moves the job to a spare.",
        "#SBATCH --no-kill",
        *(f"#SBATCH {arg}" for arg in sbatch_args),
        "",
        "exec " + shlex.join([*trainmedic, "slurm", "run", str(spec.resolve()), "--spares", str(spares),
                              *run_args, "--", *node_args]),
    ]
    return "\n".join(lines) + "\n"
