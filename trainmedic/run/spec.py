"""The job `trainmedic run` submits, built from its command line. Pure: the clock, the cwd and the
port are passed in."""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path

import yaml

from trainmedic.recovery.executor.core.rank_env import BASE_NAMES, NEVER
from trainmedic.schemas.jobs import FailureSettings, JobSpec, RestartPolicy

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")  # what a shell exports; a policy's lists are comma-separated


def default_job_id(command: list[str], now: float) -> str:
    """`<script>-<time>`: the script's (or module's, or program's) name and when it was started."""
    if "-m" in command[:-1]:
        name = command[command.index("-m") + 1].rpartition(".")[2]
    else:
        name = Path(([w for w in command[1:] if not w.startswith("-")] or command)[0]).stem
    stem = re.sub(r"[^A-Za-z0-9_-]+", "-", name).strip("-") or "job"
    return f"{stem[:40]}-{int(now) % 1_000_000:06d}"


def node_names(count: int) -> tuple[str, ...]:
    return tuple(f"local-{i}" for i in range(count))


def run_spec(job_id: str, command: list[str], *, nodes: int, ranks_per_node: int, workdir: Path,
             master_port: int, env: dict[str, str] | None = None, checkpoint_dir: str | None = None,
             resume: str | None = None, max_restarts: int | None = None,
             hang_floor_s: float | None = None) -> JobSpec:
    """A job of `nodes` local nodes x `ranks_per_node` ranks running `command` in `workdir`. It can
    run on any number of nodes from one to `nodes` (equal throughput per node), so the coordinator
    can shrink it onto the survivors when a node is taken out."""
    return JobSpec(
        id=job_id, nodes=node_names(nodes), ranks_per_node=ranks_per_node, master_port=master_port,
        throughput={size: size / nodes for size in range(1, nodes + 1)},
        command=tuple(command), env=env or {}, workdir=str(workdir), checkpoint_dir=checkpoint_dir,
        resume=resume,
        restart=RestartPolicy(max_restarts=max_restarts), failure=FailureSettings(hang_floor_s=hang_floor_s),
    )


def spec_yaml(spec: JobSpec) -> str:
    """The spec as `trainmedic job submit` reads it back: only what was set, with a note on its nodes."""
    document = spec.model_dump(mode="json", exclude_defaults=True)
    document["throughput"] = {int(size): value for size, value in spec.throughput.items()}
    return ("# Written by `trainmedic run`. To run it on a cluster: list the cluster's nodes under `nodes:`\n"
            "# (as many as a size in `throughput`), then `trainmedic job submit` this file.\n"
            + yaml.safe_dump(document, sort_keys=False))


def parse_env(pairs: list[str]) -> dict[str, str]:
    """`NAME=VALUE` pairs as a mapping; ValueError naming the first that is not one."""
    out = {}
    for pair in pairs:
        name, sep, value = pair.partition("=")
        if not sep or not name:
            raise ValueError(f"--env {pair!r}: expected NAME=VALUE")
        out[name] = value
    return out


def shell_env(environ: Mapping[str, str]) -> list[str]:
    """The names of the invoking environment `trainmedic run` passes to every rank, as torchrun does
    (the executors it starts get them as their `rank_env`, exactly named, so a name that looks like a
    secret, WANDB_API_KEY, passes too): all but trainmedic's own settings and credentials
    (TRAINMEDIC_*, but for what a rank gets anyway) and names no shell exports."""
    return sorted(name for name in environ
                  if _NAME.fullmatch(name) and name not in NEVER
                  and (not name.startswith("TRAINMEDIC_") or name in BASE_NAMES))
