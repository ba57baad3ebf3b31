"""A simulation scenario (YAML): the cluster, its jobs, the failure model, and what each policy costs;
every figure a result depends on is a field here, with its default and why (docs/simulation.md,
"Writing a scenario", gives the bundled values' sources).
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, model_validator

Seconds = float


class Strict(BaseModel):
    """A scenario part: frozen, and a field it does not know is an error (a typo must not be ignored)."""

    model_config = ConfigDict(frozen=True, extra="forbid")


class Cluster(Strict):
    nodes: int = Field(ge=1, description="nodes in the cluster: jobs' nodes, then spares")
    gpus_per_node: int = Field(default=8, ge=1)
    nodes_per_switch: int = Field(default=32, ge=1, description="nodes per leaf switch (one spine)")


class Cost(Strict):
    """A time that grows with the job's size: `base_s` + `per_node_s` x nodes."""

    base_s: Seconds = Field(ge=0)
    per_node_s: Seconds = Field(default=0.0, ge=0)

    def at(self, nodes: int) -> float:
        return self.base_s + self.per_node_s * nodes


class Checkpointing(Strict):
    interval_s: Seconds = Field(default=1800.0, gt=0, description="running time between checkpoints")
    cost_s: Seconds = Field(default=60.0, ge=0, description="training stalls this long per checkpoint")


class JobModel(Strict):
    id: str = Field(min_length=1)
    weight: float = Field(default=1.0, gt=0)
    nodes: int = Field(ge=1, description="the size it asks for and starts at")
    min_nodes: int | None = Field(default=None, ge=1, description="the smallest size it can run at "
                                  "(elastic and trainmedic may shrink it that far); default: `nodes`")
    throughput: dict[int, float] | None = Field(
        default=None, description="nodes -> FLOP/s; default: `flops_per_gpu` x GPUs x the scaling "
        "efficiency, at every size from min_nodes to nodes")
    flops_per_gpu: float = Field(default=4.0e14, gt=0, description="achieved FLOP/s of one GPU at full size")
    step_s: Seconds = Field(default=10.0, gt=0, description="one training step (a replica restore loses "
                            "the step in progress)")
    checkpoint: Checkpointing = Checkpointing()

    @model_validator(mode="after")
    def _sizes(self) -> JobModel:
        if self.min_nodes is not None and self.min_nodes > self.nodes:
            raise ValueError(f"job {self.id}: min_nodes {self.min_nodes} is more than nodes {self.nodes}")
        if self.throughput is not None and self.nodes not in self.throughput:
            raise ValueError(f"job {self.id}: throughput has no entry for its size {self.nodes}")
        return self


class FailureModel(Strict):
    """Where the trace comes from: a published mix of causes at a rate scaled to this cluster, or an
    incident log replayed (`trainmedic incidents export`)."""

    mix: str = Field(default="llama3", description="a bundled mix of causes (traces.MIXES)")
    mttf_gpu_h: float | None = Field(default=None, gt=0, description="one GPU's mean time to failure in "
                                     "hours; the cluster fails at GPUs / mttf. Default: the mix's own rate")
    rate_scale: float = Field(default=1.0, gt=0, description="multiplies the failure rate (what-if)")
    repair_h: float = Field(default=4.0, gt=0, description="mean time to repair a broken node, hours")
    replay: Path | None = Field(default=None, description="an incident log (JSON lines) used as the trace "
                                "instead of the mix")


class RestartAllCosts(Strict):
    """Megatron run by hand or by a scheduler: found by the collective timeout, resubmitted whole."""

    detect_s: Seconds = Field(default=600.0, ge=0, description="the collective timeout (NCCL's default "
                              "10 min) after which the job's failure is seen")
    restart: Cost = Cost(base_s=600.0, per_node_s=0.5)


class ElasticCosts(Strict):
    """torchrun / TorchElastic: the agent sees a crashed rank at once; a silent fault (hang, lost
    node, network) only when the collective times out. Restarts every worker from the checkpoint."""

    crash_detect_s: Seconds = Field(default=5.0, ge=0, description="the agent's monitor interval")
    detect_s: Seconds = Field(default=600.0, ge=0, description="the collective timeout, for silent faults")
    restart: Cost = Cost(base_s=120.0, per_node_s=0.1)


class TrainmedicCosts(Strict):
    """What the real coordinator's decisions cost once made; detection comes from the detector's
    configuration per category (`detect_s` overrides it)."""

    detector: dict[str, object] = Field(default_factory=dict, description="detector settings, as "
                                        "`trainmedic detector --config` takes them (e.g. hang.floor_s)")
    detect_s: dict[str, Seconds] = Field(default_factory=dict, description="category -> seconds "
                                         "from the fault to its incident on Kafka (overrides the rules)")
    pipeline_s: Seconds = Field(default=1.5, ge=0, description="telemetry to detector to the incidents "
                                "topic, added to every category's rule")
    restart: Cost = Field(default=Cost(base_s=5.0, per_node_s=0.01), description="stop and start a job's "
                          "ranks in place, state from a surviving replica")
    reattempt: Cost = Field(default=Cost(base_s=2.0), description="a SEV3 reattempt: the ranks re-sync "
                            "and run the step again, same processes")
    checkpoint_load: Cost = Field(default=Cost(base_s=60.0), description="added when a plan restores "
                                  "from the checkpoint (no replica survived)")
    returns: Literal["readmission", "uncordon"] = Field(
        default="readmission", description="how a repaired node comes back: re-admitted by the coordinator "
        "once its probation is over, or uncordoned by a person as soon as it is repaired")
    operator_s: Seconds = Field(default=1800.0, ge=0, description="a person answers the coordinator's "
                                "alert (the isolation cap reached, a job given up on) after this long")
    person_restarts: bool = Field(default=True, description="a person answers a job's `recovery_failed` "
                                  "by stopping it and submitting it again under a new id (today's "
                                  "`trainmedic job stop` and `job submit`); false: it stays down")
    coordinator: dict[str, object] = Field(default_factory=dict, description="CoordinatorConfig "
                                           "fields to override (restart_backoff_s, isolation_cap, ...)")


class Policies(Strict):
    restart_all: RestartAllCosts = RestartAllCosts()
    elastic: ElasticCosts = ElasticCosts()
    trainmedic: TrainmedicCosts = TrainmedicCosts()


class Scenario(Strict):
    name: str = Field(min_length=1)
    description: str = ""
    duration_days: float = Field(gt=0, le=3650)
    cluster: Cluster
    jobs: tuple[JobModel, ...] = Field(min_length=1)
    failures: FailureModel = FailureModel()
    policies: Policies = Policies()
    seeds: int = Field(default=3, ge=1, le=1000, description="seeds `trainmedic simulate` runs by default")

    @model_validator(mode="after")
    def _fits(self) -> Scenario:
        ids = [job.id for job in self.jobs]
        if len(set(ids)) != len(ids):
            raise ValueError("two jobs share an id")
        asked = sum(job.nodes for job in self.jobs)
        if asked > self.cluster.nodes:
            raise ValueError(f"the jobs ask for {asked} nodes; the cluster has {self.cluster.nodes}")
        return self

    @property
    def duration_s(self) -> float:
        return self.duration_days * 86_400.0


def load(path: Path) -> Scenario:
    """A scenario from YAML; a relative `failures.replay` is taken from the scenario's folder."""
    data = yaml.safe_load(path.read_text()) or {}
    replay = (data.get("failures") or {}).get("replay")
    if replay is not None and not Path(replay).is_absolute():
        data["failures"]["replay"] = str(path.parent / replay)
    return Scenario.model_validate(data)
