"""The executor's one validated configuration object."""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, SecretBytes, model_validator

from recovery.executor.admission import AdmissionPolicy

DEFAULT_FRESHNESS_S = 60.0
DEFAULT_STOP_GRACE_S = 10.0


class ExecutorConfig(BaseModel):
    """How one node's executor runs. Either a cluster key or `insecure`, never both, never neither."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    node: str = Field(min_length=1, description="this node's name, as commands address it")
    state_dir: Path = Field(description="ledger, rank logs and snapshots "
                            "(default $TRAINMEDIC_HOME/executor/NODE)")
    freshness_s: float = Field(default=DEFAULT_FRESHNESS_S, gt=0,
                               description="refuse commands whose ts is further than this from now")
    stop_grace_s: float = Field(default=DEFAULT_STOP_GRACE_S, gt=0,
                                description="seconds between SIGTERM and SIGKILL when stopping ranks")
    poll_s: float = Field(default=0.2, gt=0, le=5, description="longest wait for a command in one poll")
    key: SecretBytes | None = Field(default=None, description="the cluster key; loaded from "
                                    "TRAINMEDIC_CLUSTER_KEY_FILE or TRAINMEDIC_CLUSTER_KEY, never a flag")
    insecure: bool = Field(default=False, description="accept unsigned commands (no cluster key); "
                           "for local experiments only")
    warm_start: bool = Field(default=True, description="fork ranks from a warm launcher that has torch "
                             "imported (--no-warm-start: every rank a new interpreter)")
    admission: AdmissionPolicy = Field(default_factory=AdmissionPolicy, description="which commands "
                                       "ranks may run, and what of this environment they get")

    @model_validator(mode="after")
    def _one_trust_mode(self) -> ExecutorConfig:
        if self.key is None and not self.insecure:
            raise ValueError(
                "no cluster key: set TRAINMEDIC_CLUSTER_KEY_FILE or TRAINMEDIC_CLUSTER_KEY, "
                "or pass --insecure to accept unsigned commands"
            )
        if self.key is not None and self.insecure:
            raise ValueError("a cluster key and --insecure exclude each other")
        return self

    @property
    def key_bytes(self) -> bytes | None:
        """The key to verify with, or None in insecure mode."""
        return None if self.key is None else self.key.get_secret_value()

    @property
    def ledger_path(self) -> Path:
        return self.state_dir / "ledger.jsonl"

    @property
    def logs_dir(self) -> Path:
        return self.state_dir / "logs"

    def snapshot_dir(self, job: str) -> Path:
        """Node-local directory where a job's ranks keep their per-step snapshots."""
        return self.state_dir / "snapshots" / job
