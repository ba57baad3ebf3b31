"""The coordinator's one configuration object: deadlines, retries, the MTBF prior, the cluster; its
fields are `trainmedic coordinator`'s flags, TRAINMEDIC_COORDINATOR_* variables and YAML keys, the
node list YAML only (docs/coordinator.md, "The adapter, restarts and fail-over").
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator


class NodeConfig(BaseModel):
    """One machine of the cluster: its leaf switch and, where its id is not a host name, its address."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    id: str = Field(min_length=1)
    switch: str | None = None
    address: str | None = None
    gpus: int = Field(default=8, ge=1)


class CoordinatorConfig(BaseModel):
    """Validated when built. `nodes` is the cluster: a job, plan or incident naming another node
    is rejected or isolates nothing (job_bounds.py, `ClusterState.in_cluster`).

    A node's address is its `address`, else `default_address`, else its id (a host name).
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    ack_timeout_s: float = Field(default=30.0, gt=0, description="a command's first ack, per send")
    done_timeout_s: float = Field(default=600.0, gt=0, description="from accepted to done")
    max_retries: int = Field(default=2, ge=0, description="re-sends of an unanswered command")
    mtbf_prior_s: float = Field(default=3 * 3600.0, gt=0, description="MTBF assumed with no history")
    mtbf_prior_weight: float = Field(default=1.0, gt=0, description="how many failures the prior counts as")
    transition_s: float = Field(default=60.0, ge=0, description="planner default for jobs without one")
    tick_s: float = Field(default=1.0, gt=0, description="how often deadlines are checked")
    default_address: str | None = Field(default=None, min_length=1, description="address of every node "
                                        "without one, e.g. 127.0.0.1 when all run locally (default: "
                                        "the node id is its host name)")
    isolation_cap: float = Field(default=0.1, gt=0, le=1, description="the share of the cluster's nodes "
                                 "the coordinator may isolate on its own per isolation window (at least "
                                 "one node); beyond it nodes stay in service and a person decides")
    isolation_window_s: float = Field(default=600.0, gt=0, description="the rolling window of the "
                                      "isolation cap")
    group_window_s: float = Field(default=1.5, ge=0, description="SEV1 incidents within this of the first "
                                  "are planned together: one re-plan, one restart per job")
    restart_backoff_s: tuple[float, ...] = Field(default=(30.0, 120.0, 600.0), min_length=1,
                                                 description="wait before a job's 2nd, 3rd, ... restart "
                                                 "within the restart window, after the previous one (the "
                                                 "first goes at once; the last wait repeats)")
    max_restarts: int = Field(default=4, ge=0, description="restarts of a job within the restart window "
                              "before the coordinator gives up on it (recovery_failed and an alert)")
    restart_window_s: float = Field(default=3600.0, gt=0, description="the rolling window that restarts "
                                    "count in")
    restarts_before_first_step: int = Field(default=1, ge=0, description="restarts of a job that never "
                                            "completed a step before the coordinator gives up on it (a "
                                            "start that cannot work is not healed by waiting); at most "
                                            "max_restarts")
    healthy_run_s: float = Field(default=600.0, gt=0, description="a generation that stepped for this long "
                                 "before it failed gives its job its restart budget back: the restarts "
                                 "before it no longer count, and the next one goes at once")
    keys_dir: Path | None = Field(default=None, description="folder of the keys: the coordinator's "
                                  "signing key (ID.key), its public keys and those of the operators and "
                                  "nodes it trusts (ID.pub, roles in keys.json); default "
                                  "$TRAINMEDIC_HOME/keys (`trainmedic keys generate`)")
    health_check_deadline_s: float = Field(default=120.0, gt=0, description="how long a suspect node's "
                                           "executor has to answer its health check, from its first send "
                                           "(re-sent every ack_timeout_s until then); no answer by then "
                                           "isolates the node, as a failed check does; only refusals raise "
                                           "a WARN instead")
    readmission: Literal["auto", "off"] = Field(default="auto", description="re-admit an isolated node "
                                                "on its own (auto) or only by `trainmedic nodes uncordon` "
                                                "(off)")
    readmit_probation_s: float = Field(default=300.0, ge=0, description="how long an isolated node's "
                                       "record must be clean (its fault resolved, no incident since) "
                                       "before it is re-admitted")
    readmit_max_failures: int = Field(default=3, ge=1, description="a node isolated more often than "
                                      "this within the re-admission window waits for a person")
    readmit_window_s: float = Field(default=24 * 3600.0, gt=0, description="the rolling window "
                                    "readmit_max_failures counts in")
    insecure: bool = Field(default=False, description="send unsigned commands (executors that check "
                           "signatures refuse them) and fold unsigned command records; excludes "
                           "--keys-dir")
    nodes: tuple[NodeConfig, ...] = Field(default=(), description="the cluster: each node's id, switch, "
                                          "address and GPUs (YAML only); jobs may name only these")

    @model_validator(mode="after")
    def _consistent(self) -> CoordinatorConfig:
        if self.insecure and self.keys_dir is not None:
            raise ValueError(f"--insecure and a keys folder ({self.keys_dir}) exclude each other: drop "
                             "--insecure to sign commands with its key, or drop --keys-dir "
                             "(TRAINMEDIC_COORDINATOR_KEYS_DIR) to send unsigned commands")
        if self.ack_timeout_s > self.done_timeout_s:
            raise ValueError(f"ack_timeout_s ({self.ack_timeout_s}) must not exceed done_timeout_s "
                             f"({self.done_timeout_s}): an accepted command cannot be faster than its ack")
        if self.tick_s > self.ack_timeout_s:
            raise ValueError(f"tick_s ({self.tick_s}) must not exceed ack_timeout_s ({self.ack_timeout_s})")
        if any(delay < 0 for delay in self.restart_backoff_s):
            raise ValueError(f"restart_backoff_s must not be negative: {self.restart_backoff_s}")
        seen: set[str] = set()
        for node in self.nodes:
            if node.id in seen:
                raise ValueError(f"nodes lists {node.id!r} twice")
            seen.add(node.id)
        return self
