"""Where a service finds its role's Kafka credentials: one librdkafka config file per role in the
credentials folder, read when TRAINMEDIC_KAFKA_CONFIG is not set (docs/security.md, "Broker
authentication and ACLs").
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path

from trainmedic.common.errors import ConfigError

__all__ = ["clear", "read_role", "write_roles"]


def read_role(folder: Path, role: str) -> dict[str, str] | None:
    """`role`'s librdkafka settings from `folder`, or None when the folder holds none for it."""
    path = folder / f"{role}.json"
    try:
        config = json.loads(path.read_text())
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as err:
        raise ConfigError(f"cannot read the Kafka credentials {path}: {err}") from None
    if not isinstance(config, dict):
        raise ConfigError(f"{path} must be a JSON object of librdkafka settings")
    return {str(k): str(v) for k, v in config.items()}


def write_roles(folder: Path, configs: Mapping[str, Mapping[str, str]]) -> None:
    """One `ROLE.json` per role (mode 0600) in `folder` (mode 0700); other roles' files are removed."""
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    folder.chmod(0o700)
    clear(folder, keep=set(configs))
    for role, config in configs.items():
        path = folder / f"{role}.json"
        tmp = path.with_suffix(".tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as out:
            json.dump(dict(config), out, indent=2)
        tmp.replace(path)


def clear(folder: Path, keep: set[str] = frozenset()) -> None:
    """Remove the role files in `folder` (except `keep`'s): a broker without them needs none."""
    for path in folder.glob("*.json"):
        if path.stem not in keep:
            path.unlink()
