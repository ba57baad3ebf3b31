"""Where a service finds its role's Kafka credentials: one librdkafka config file per role in the
credentials folder, read when TRAINMEDIC_KAFKA_CONFIG is not set, and for a TLS broker its CA
(`ca.pem`), which the files name relative to their folder, so the folder can be copied to another
host as it is (docs/security.md, "Broker authentication and ACLs").
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path

from trainmedic.bus.telemetry_keys import MASTER_FILE
from trainmedic.common.errors import ConfigError

__all__ = ["CA_FILE", "clear", "read_role", "write_roles"]

CA_FILE = "ca.pem"
# librdkafka settings that name a file: a relative one is relative to the role file's folder.
PATH_KEYS = ("ssl.ca.location", "ssl.certificate.location", "ssl.key.location", "ssl.keystore.location",
             "ssl.crl.location")


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
    config = {str(k): str(v) for k, v in config.items()}
    for key in PATH_KEYS:
        if key in config and config[key] != "probe":  # probe: librdkafka's search of the system's CAs
            config[key] = str(folder.resolve() / Path(config[key]).expanduser())
    return config


def write_roles(folder: Path, configs: Mapping[str, Mapping[str, str]], ca_pem: bytes | None = None) -> None:
    """One `ROLE.json` per role (mode 0600) in `folder` (mode 0700), and the broker's CA as `ca.pem`
    when given; other roles' files (and a CA not given) are removed."""
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    folder.chmod(0o700)
    clear(folder, keep=set(configs))
    if ca_pem is not None:
        _replace(folder / CA_FILE, ca_pem, 0o644)
    for role, config in configs.items():
        _replace(folder / f"{role}.json", json.dumps(dict(config), indent=2).encode(), 0o600)


def clear(folder: Path, keep: set[str] = frozenset()) -> None:
    """Remove the role files in `folder` (except `keep`'s), its CA and the telemetry master key: a
    broker without them needs none."""
    for path in folder.glob("*.json"):
        if path.stem not in keep:
            path.unlink()
    (folder / CA_FILE).unlink(missing_ok=True)
    (folder / MASTER_FILE).unlink(missing_ok=True)


def _replace(path: Path, data: bytes, mode: int) -> None:
    tmp = path.with_suffix(".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    with os.fdopen(fd, "wb") as out:
        out.write(data)
    tmp.chmod(mode)
    tmp.replace(path)
