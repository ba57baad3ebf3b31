"""The training job the fault tests run on the bed, and what they read of it: its rank 0's steps and
losses (its logs), its incidents and the nodes isolated (Kafka)."""

from __future__ import annotations

import math
import re
import sys

from tests.multihost.deploy import Cluster
from trainmedic.demo.losses import compare, logged, reference
from trainmedic.local.cluster import rendezvous_base
from trainmedic.schemas import Incident, RecoveryPlanned
from trainmedic.schemas.recovery import RecoverySkipped

JOB = "mh"


def job(cluster: Cluster, steps: int, nodes: tuple[str, ...] = ("n1", "n2")) -> dict:
    return {"id": JOB, "nodes": list(nodes), "ranks_per_node": 1, "master_port": rendezvous_base(),
            "throughput": {1: 1.0e14, 2: 2.0e14},
            "command": [sys.executable, "-m", "trainmedic.demo.train", "--steps", str(steps),
                        "--step-s", "0.25", "--report", "--timeout-s", "30"],
            "checkpoint_dir": str(cluster.root / "checkpoints"), "workdir": str(cluster.root),
            "transition_s": 10}


def first_step_after(cluster: Cluster, ts: float, name: str = JOB, generation: int | None = None) -> float:
    """When rank 0 of a later generation (of `generation`, if given) first logged a step after `ts`,
    seconds after it."""
    found = [float(t) for path in cluster.rank_logs(name, 0)
             for gen, t in re.findall(r"^step \d+ loss \S+ gen (\d+) rank 0 t (\S+)", path.read_text(), re.M)
             if (int(gen) > 0 if generation is None else int(gen) == generation) and float(t) > ts]
    return min(found) - ts if found else math.nan


def steps_logged(cluster: Cluster, name: str = JOB) -> dict[tuple[int, int], float]:
    return logged(cluster.rank_logs(name, 0))


def last_step(cluster: Cluster, name: str = JOB) -> int:
    return max((step for _, step in steps_logged(cluster, name)), default=-1)


def opened(cluster: Cluster) -> list[Incident]:
    return [e for e in cluster.events("incidents") if isinstance(e, Incident) and e.status == "open"]


def isolated(cluster: Cluster) -> set[str]:
    return {n for e in cluster.events("recovery") if isinstance(e, RecoveryPlanned | RecoverySkipped)
            for n in (e.isolated or {})}


def check_losses(cluster: Cluster, steps: int, name: str = JOB) -> None:
    losses = steps_logged(cluster, name)
    assert {step for _, step in losses} == set(range(steps)), "a step was lost"
    check = compare(losses, list(reference("mlp", steps)))
    assert check.matches, check.describe()
