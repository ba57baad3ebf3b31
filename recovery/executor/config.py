"""The executor's one validated configuration object."""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, InstanceOf, model_validator

from recovery.executor.admission import AdmissionPolicy
from recovery.signing import SigningKey, TrustedKeys

DEFAULT_FRESHNESS_S = 60.0
DEFAULT_STOP_GRACE_S = 10.0


class ExecutorConfig(BaseModel):
    """How one node's executor runs. Either keys (the coordinator's public keys it trusts, and this
    node's own key that signs its acks) or `insecure`, never both, never neither: a keys folder
    named together with `insecure` is a configuration error."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    node: str = Field(min_length=1, description="this node's name, as commands address it")
    state_dir: Path = Field(description="ledger, rank logs and snapshots "
                            "(default $TRAINMEDIC_HOME/executor/NODE)")
    freshness_s: float = Field(default=DEFAULT_FRESHNESS_S, gt=0,
                               description="refuse commands whose ts is further than this from now")
    stop_grace_s: float = Field(default=DEFAULT_STOP_GRACE_S, gt=0,
                                description="seconds between SIGTERM and SIGKILL when stopping ranks")
    poll_s: float = Field(default=0.2, gt=0, le=5, description="longest wait for a command in one poll")
    keys_dir: Path | None = Field(default=None, description="folder of the coordinator's public keys "
                                  "(*.pub) that commands must be signed with, and of this node's key that "
                                  "signs its acks (`trainmedic keys generate --node NODE`); default "
                                  "$TRAINMEDIC_HOME/keys")
    trusted: InstanceOf[TrustedKeys] | None = Field(default=None, description="the public keys loaded "
                                                    "from keys_dir, by key id")
    node_key: InstanceOf[SigningKey] | None = Field(default=None, description="this node's private key, "
                                                    "loaded from keys_dir: every ack is signed with it")
    insecure: bool = Field(default=False, description="accept unsigned commands, with no keys; "
                           "for local experiments only (excludes --keys-dir)")
    warm_start: bool = Field(default=True, description="fork ranks from a warm launcher that has torch "
                             "imported (--no-warm-start: every rank a new interpreter)")
    admission: AdmissionPolicy = Field(default_factory=AdmissionPolicy, description="which commands "
                                       "ranks may run, and what of this environment they get")

    @model_validator(mode="after")
    def _one_trust_mode(self) -> ExecutorConfig:
        if self.insecure and (self.keys_dir is not None or self.trusted is not None or self.node_key):
            raise ValueError(f"--insecure and a keys folder ({self.keys_dir}) exclude each other: drop "
                             "--insecure to verify commands with its keys, or drop --keys-dir "
                             "(TRAINMEDIC_EXECUTOR_KEYS_DIR) to accept unsigned commands")
        if (self.trusted is None or self.node_key is None) and not self.insecure:
            raise ValueError("no trusted command keys or no key of this node: set --keys-dir (the "
                             "coordinator's *.pub files and this node's key), or pass --insecure to accept "
                             "unsigned commands and send unsigned acks")
        return self

    @property
    def ledger_path(self) -> Path:
        return self.state_dir / "ledger.jsonl"

    @property
    def logs_dir(self) -> Path:
        return self.state_dir / "logs"

    def snapshot_dir(self, job: str) -> Path:
        """Node-local directory where a job's ranks keep their per-step snapshots."""
        return self.state_dir / "snapshots" / job
