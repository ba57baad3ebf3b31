"""The environment a rank starts with: an allow-list of the executor's, never its credentials, then the
node's data-plane NIC, then the job's own env, then the hook's channel and the worker contract, which
nothing overrides (docs/executor.md, "The environment of a rank").
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping

# Exact names a rank gets from the executor's environment.
BASE_NAMES = frozenset({
    "PATH", "HOME", "USER", "LOGNAME", "SHELL", "LANG", "LANGUAGE", "TERM", "TZ", "TMPDIR",
    "PYTHONPATH", "PYTHONUNBUFFERED", "PYTHONHASHSEED", "VIRTUAL_ENV", "LD_LIBRARY_PATH",
    "TRAINMEDIC_DEMO_FAULTS",  # the shipped fault injection (trainmedic/runtime/faults.py)
})
# Name prefixes a rank gets: locale, the accelerator and its collectives, thread counts.
BASE_PREFIXES = ("LC_", "CUDA_", "NCCL_", "NVIDIA_", "OMP_", "MKL_", "GLOO_", "TORCH_")

# Never passed, whatever a policy lists: trainmedic's own keys and Kafka credentials (the retired
# rank principal's among them).
NEVER = frozenset({"TRAINMEDIC_CLUSTER_KEY", "TRAINMEDIC_CLUSTER_KEY_FILE", "TRAINMEDIC_KAFKA_CONFIG",
                   "TRAINMEDIC_RANK_KAFKA_CONFIG", "TRAINMEDIC_CREDENTIALS_DIR",
                   "TRAINMEDIC_TELEMETRY_KEY_FILE"})
# A name that says it holds a secret passes only when the policy names it exactly (e.g. HF_TOKEN).
SECRET = re.compile(r"KEY|SECRET|PASSWORD|PASSWD|TOKEN|CREDENTIAL|SASL|JAAS|AUTH|COOKIE", re.IGNORECASE)


def _passes(name: str, extra: Iterable[str]) -> bool:
    if name in NEVER:
        return False
    listed = name in extra
    if SECRET.search(name):
        return listed
    matches = listed or any(p.endswith("*") and name.startswith(p[:-1]) for p in extra)
    return matches or name in BASE_NAMES or name.startswith(BASE_PREFIXES)


def base_env(parent: Mapping[str, str], extra: tuple[str, ...] = ()) -> dict[str, str]:
    """What every rank of this executor inherits from `parent` (the executor's environment);
    `extra` are the policy's `rank_env` names and prefixes."""
    return {name: value for name, value in parent.items() if _passes(name, extra)}


def rank_env(parent: Mapping[str, str], extra: tuple[str, ...], channel: Mapping[str, str],
             contract: Mapping[str, str], job: Mapping[str, str] | None = None,
             node: Mapping[str, str] | None = None) -> dict[str, str]:
    """One rank's environment: `base_env`, then the node's own settings (`node`: the NIC of its data
    plane), then the job's env (`job`, less the names in NEVER), then where its hook reports
    (`channel`: the executor's socket), then the worker contract, which nothing overrides."""
    own = {name: value for name, value in (job or {}).items() if name not in NEVER}
    return {**base_env(parent, extra), **(node or {}), **own, **channel, **contract}
