"""Which Slurm job owns this node (what the site's Slurm prolog wrote: `JOBID USER`) and whether a
trainmedic job is one of that job's (`trainmedic slurm run` names them NAME-slurmJOBID, NAME-slurmJOBID-rN
after a requeue): on a node Slurm schedules, ranks start only for the job the node is allocated to."""

from __future__ import annotations

import re

MAX_BYTES = 256  # what is read of the owner file: a job id and a user name


def owner(text: str) -> str | None:
    """The Slurm job id the owner file names, or None."""
    found = re.match(r"([0-9]{1,20})(?:[ \n]|$)", text)
    return found.group(1) if found else None


def refusal(job: str, text: str | None, path: str) -> str | None:
    """Why ranks of trainmedic job `job` may not start here, given the owner file's `text` (None: no
    file); None when they may."""
    if text is None:
        return (f"no Slurm job owns this node ({path} is absent; the Slurm prolog writes it when a job is "
                "allocated the node): ranks would run outside any allocation")
    slurm_job = owner(text)
    if slurm_job is None:
        return f"{path} names no Slurm job id: {text.strip()[:80]!r}"
    if not re.fullmatch(rf".+-slurm{slurm_job}(-r[0-9]+)?", job):
        return (f"this node is Slurm job {slurm_job}'s, and job {job} is not one of its (those are named "
                f"NAME-slurm{slurm_job}, by `trainmedic slurm run`)")
    return None
