"""The executor's one validated configuration object."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, InstanceOf, model_validator

from trainmedic.recovery.executor.core.admission import AdmissionPolicy
from trainmedic.recovery.executor.data_plane import DataPlane
from trainmedic.recovery.executor.health_check import argv_of
from trainmedic.recovery.executor.job_dirs import SNAPSHOTS, RankUser
from trainmedic.recovery.signing import SigningKey, TrustedKeys

DEFAULT_FRESHNESS_S = 60.0
DEFAULT_STOP_GRACE_S = 10.0


class ExecutorConfig(BaseModel):
    """How one node's executor runs. Either keys (the coordinator's public keys it trusts, and this
    node's own key that signs its acks) or `insecure`, never both, never neither: a keys folder
    named together with `insecure` is a configuration error."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    node: str = Field(min_length=1, description="this node's name, as commands address it")
    state_dir: Path = Field(description="the executor's ledger and record of ranks "
                            "(default $TRAINMEDIC_HOME/executor/NODE)")
    jobs_dir: Path = Field(description="the ranks' files: one directory per submission of a job "
                           "(JOB/SUBMISSION) with its logs and snapshots, the ranks' HOME; outside "
                           "TRAINMEDIC_HOME, which holds the control plane's secrets (default "
                           "$TRAINMEDIC_HOME-jobs/NODE)")
    run_as: str | None = Field(default=None, description="the Unix user (name or uid) ranks run as, "
                               "so that a job cannot read this node's keys and credentials; needs an "
                               "executor running as root (none: ranks run as the executor's user, "
                               "with a warning)")
    rank_user: InstanceOf[RankUser] | None = Field(default=None, description="run_as, looked up")
    job_uids: str | None = Field(default=None, pattern=r"^[0-9]+-[0-9]+$", description="FIRST-LAST: "
                                 "each job's ranks run as a uid of their own from this range (e.g. "
                                 "61184-65519), no user of /etc/passwd, so that two jobs' ranks can "
                                 "neither ptrace nor read each other; needs root; excludes run_as")
    ranks_as_root: bool = Field(default=False, description="an executor running as root without run_as "
                                "refuses to start unless given this: its ranks would run as root, able to "
                                "read every key and credential of the node and to ptrace the executor")
    freshness_s: float = Field(default=DEFAULT_FRESHNESS_S, gt=0,
                               description="refuse commands whose ts is further than this from now")
    stop_grace_s: float = Field(default=DEFAULT_STOP_GRACE_S, gt=0,
                                description="seconds between SIGTERM and SIGKILL when stopping ranks")
    poll_s: float = Field(default=0.2, gt=0, le=5, description="longest wait for a command in one poll")
    keys_dir: Path | None = Field(default=None, description="folder of the coordinator's public keys "
                                  "(*.pub, trusted with `trainmedic keys trust ID.pub --role coordinator`) "
                                  "that commands must be signed with, and of this node's key that "
                                  "signs its acks (`trainmedic keys generate --node NODE`); default "
                                  "$TRAINMEDIC_HOME/keys")
    trusted: InstanceOf[TrustedKeys] | None = Field(default=None, description="the public keys loaded "
                                                    "from keys_dir, by key id")
    node_key: InstanceOf[SigningKey] | None = Field(default=None, description="this node's private key, "
                                                    "loaded from keys_dir: every ack is signed with it")
    insecure: bool = Field(default=False, description="accept unsigned commands, with no keys; "
                           "for local experiments only (excludes --keys-dir)")
    warm_start: bool = Field(default=True, description="fork `python -m` ranks from a job launcher that "
                             "has torch imported (--no-warm-start: every rank a new interpreter)")
    job_pids_max: int | None = Field(default=None, gt=0, description="the most processes and threads "
                                     "one job may have on this node, in its cgroup (none: no limit)")
    job_memory_max: int | None = Field(default=None, gt=0, description="the most memory, in bytes, one "
                                       "job may use on this node, in its cgroup (none: no limit)")
    data_interface: str | None = Field(default=None, min_length=1, description="the NIC this node's "
                                       "ranks reach the job's other nodes over (e.g. eth0): every rank gets "
                                       "GLOO_SOCKET_IFNAME and NCCL_SOCKET_IFNAME naming it, unless its "
                                       "job's env sets them (none: the NIC that holds data_address, else "
                                       "neither is set)")
    data_address: str | None = Field(default=None, min_length=1, description="this node's IP on that "
                                     "network, held by one of its NICs (its `address:` in the coordinator's "
                                     "nodes config); ranks get it as TRAINMEDIC_NODE_ADDRESS, and one whose "
                                     "MASTER_ADDR is loopback in a job of several nodes stops at once (none: "
                                     "data_interface's address)")
    data_plane: InstanceOf[DataPlane] | None = Field(default=None, description="data_interface and "
                                                     "data_address, checked against this host's NICs")
    health_check: str | None = Field(default=None, min_length=1, description="the command this node "
                                     "runs as its health check when the coordinator asks (a suspect node), "
                                     "split as a shell would, run without one: exit 0 passes (e.g. `dcgmi "
                                     "diag -r 1`); none: the built-in probe (NVML: every GPU opened and "
                                     "read; a queued Xid, a pending page retirement or row remap, or an "
                                     "uncorrected ECC error fails it; no GPU: it passes, saying so)")
    health_check_timeout_s: float = Field(default=60.0, gt=0, description="the longest a health check "
                                          "may run (less when the coordinator's deadline is nearer); "
                                          "then it is killed and fails")
    admission: AdmissionPolicy = Field(default_factory=AdmissionPolicy, description="which commands "
                                       "ranks may run, and what of this environment they get")
    slurm_owner_file: Path | None = Field(default=None, description="where a Slurm prolog writes the job "
                                          "that owns this node (`trainmedic slurm site-files`): ranks start "
                                          "only for that Slurm job's trainmedic jobs (ids ending "
                                          "-slurmID), and none while no job owns the node (none: no such "
                                          "check, for nodes Slurm does not schedule)")

    @model_validator(mode="before")
    @classmethod
    def _jobs_beside_state(cls, values: Any) -> Any:
        """A config built without jobs_dir (not by the CLI, which defaults it) keeps its jobs' files
        beside its state dir, STATE_DIR-jobs, never inside it."""
        if isinstance(values, dict) and values.get("jobs_dir") is None and values.get("state_dir"):
            state = Path(values["state_dir"])
            values = {**values, "jobs_dir": state.with_name(f"{state.name}-jobs")}
        return values

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
        if self.job_uids is not None and self.run_as is not None:
            raise ValueError(f"job_uids {self.job_uids} and run_as {self.run_as} exclude each other: a "
                             "uid per job, or one user for every job")
        if self.run_as is not None and (self.rank_user is None or self.run_as not in
                                        (self.rank_user.name, str(self.rank_user.uid))):
            raise ValueError(f"run_as {self.run_as!r} is not looked up (rank_user): build the config "
                             "with the executor's build_config")
        if self.health_check is not None:
            try:
                argv_of(self.health_check)
            except ValueError as err:
                raise ValueError(f"health_check {self.health_check!r} cannot be split into a command: "
                                 f"{err}") from None
        if (self.data_interface or self.data_address) and self.data_plane is None:
            raise ValueError("data_interface and data_address are not checked against this host's NICs "
                             "(data_plane): build the config with the executor's build_config")
        return self

    def ledger_path(self, prefix: str) -> Path:
        """The ledger of the deployment whose topics start with `prefix`: what it applied, its epoch, its
        jobs' generations and where its commands were read, none of which holds for another
        deployment on this node (`trainmedic run` makes one per run, and a job id runs in many)."""
        return self.state_dir / "ledgers" / f"{prefix.rstrip('.') or 'default'}.jsonl"

    def job_dir(self, job: str, submission: str) -> Path:
        """The directory of one submission's ranks on this node: their HOME, logs and snapshots
        (job_dirs.py)."""
        return self.jobs_dir / job / submission

    def snapshot_dir(self, job: str, submission: str) -> Path:
        """Node-local directory where one submission's ranks keep their per-step snapshots."""
        return self.job_dir(job, submission) / SNAPSHOTS
