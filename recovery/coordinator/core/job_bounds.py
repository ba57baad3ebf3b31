"""What a job submission may ask of the cluster: the planner's inputs bounded, its nodes the cluster's,
so that one submission cannot take over the cluster (docs/coordinator.md, "Bounds on what a job may ask").
"""

from __future__ import annotations

from collections.abc import Callable

from trainmedic.recovery.executor.core.decide import directory_name
from trainmedic.schemas.jobs import LATEST, JobSpec
from trainmedic.schemas.plan import MAX_JOB_WEIGHT, MAX_NODE_FLOPS

MAX_RANKS_PER_NODE = 256
MAX_TRANSITION_S = 86_400.0
MAX_ARGV_WORDS = 256
MAX_ARGV_BYTES = 64 * 1024
MAX_PATH_BYTES = 4096  # PATH_MAX on Linux
RESERVED_ENV = frozenset({"MASTER_ADDR", "MASTER_PORT", "RANK", "WORLD_SIZE", "LOCAL_RANK",
                          "LOCAL_WORLD_SIZE"})
RESERVED_ENV_PREFIX = "TRAINMEDIC_"


def job_problems(spec: JobSpec, in_cluster: Callable[[str], bool]) -> list[str]:
    """Every reason `spec` may not be planned, in words; empty when it may."""
    problems = []
    if not directory_name(spec.id):
        problems.append(f"job id {spec.id!r} cannot name a directory of its logs and snapshots on a node "
                        "(letters, digits and . _ : - only, at most 128, not . or ..)")
    if spec.weight > MAX_JOB_WEIGHT:
        problems.append(f"weight {spec.weight:g} is above {MAX_JOB_WEIGHT:g}")
    for size, flops in sorted(spec.throughput.items()):
        if flops > size * MAX_NODE_FLOPS:
            problems.append(f"throughput {flops:g} FLOP/s at {size} nodes is above {MAX_NODE_FLOPS:g} "
                            "per node")
    if spec.ranks_per_node > MAX_RANKS_PER_NODE:
        problems.append(f"ranks_per_node {spec.ranks_per_node} is above {MAX_RANKS_PER_NODE}")
    if spec.transition_s is not None and spec.transition_s > MAX_TRANSITION_S:
        problems.append(f"transition_s {spec.transition_s:g} is above {MAX_TRANSITION_S:g}")
    argv = spec.argv
    if len(argv) > MAX_ARGV_WORDS:
        problems.append(f"command and args have {len(argv)} words, more than {MAX_ARGV_WORDS}")
    argv_bytes = sum(len(word.encode()) + 1 for word in argv)
    if argv_bytes > MAX_ARGV_BYTES:
        problems.append(f"command and args are {argv_bytes} bytes, more than {MAX_ARGV_BYTES}")
    for name, path in (("checkpoint_dir", spec.checkpoint_dir), ("workdir", spec.workdir),
                       ("resume", spec.resume)):
        if path is not None and len(path.encode()) >= MAX_PATH_BYTES:
            problems.append(f"{name} is longer than a path can be ({MAX_PATH_BYTES} bytes)")
    if spec.resume == LATEST and spec.checkpoint_dir is None:
        problems.append("resume: latest names the newest checkpoint an earlier submission wrote in "
                        "checkpoint_dir, and the job has no checkpoint_dir")
    reserved = sorted(n for n in spec.env if n in RESERVED_ENV or n.startswith(RESERVED_ENV_PREFIX))
    if reserved:
        them = "it" if len(reserved) == 1 else "them"
        problems.append(f"env sets {', '.join(reserved)}: the executor sets {them} for each rank"
                        " (the worker contract: MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE, "
                        "LOCAL_RANK, LOCAL_WORLD_SIZE, TRAINMEDIC_*)")
    unknown = [node for node in dict.fromkeys((*spec.nodes, *(spec.pool or ()))) if not in_cluster(node)]
    if unknown:
        problems.append(f"{'node' if len(unknown) == 1 else 'nodes'} {', '.join(unknown[:5])}"
                        f"{' ...' if len(unknown) > 5 else ''} not in the cluster")
    return problems
