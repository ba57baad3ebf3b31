"""Validated settings shared by every service: where Kafka is and how to talk to it, from the
TRAINMEDIC_KAFKA_* / TRAINMEDIC_TOPIC_PREFIX variables or a role's credentials file
(docs/producers.md, "Environment variables"; docs/security.md, "Broker authentication and ACLs").
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, SecretStr, ValidationError, field_validator

from trainmedic.bus.addresses import all_loopback
from trainmedic.bus.credentials import read_role
from trainmedic.bus.telemetry_keys import MASTER_FILE, NODE_FILE, TelemetryKey, env_key
from trainmedic.common.errors import ConfigError
from trainmedic.schemas import DEFAULT_PREFIX, Topics

DEFAULT_BOOTSTRAP = "127.0.0.1:9092"
# librdkafka keys whose values are secrets: kept out of logs and reprs.
SECRET_KEYS = ("sasl.password", "ssl.key.password", "ssl.keystore.password", "sasl.oauthbearer.client.secret")


def _loopback(bootstrap: str) -> bool:
    try:
        return all_loopback(bootstrap)
    except ConfigError:  # not HOST:PORT: the validator has said so already
        return False


def home(env: Mapping[str, str] = os.environ) -> Path:
    """Where trainmedic keeps this user's local state (broker data, credentials, keys, runs): the same
    folder from any directory. TRAINMEDIC_HOME, else $XDG_STATE_HOME/trainmedic, else
    ~/.local/state/trainmedic."""
    if env.get("TRAINMEDIC_HOME"):
        return Path(env["TRAINMEDIC_HOME"]).expanduser().resolve()
    state = env.get("XDG_STATE_HOME") or Path(env.get("HOME") or Path.home()) / ".local" / "state"
    return (Path(state).expanduser() / "trainmedic").resolve()


def credentials_dir(env: Mapping[str, str] = os.environ) -> Path:
    """Where the roles' Kafka credentials are: TRAINMEDIC_CREDENTIALS_DIR, else
    `$TRAINMEDIC_HOME/credentials`."""
    if env.get("TRAINMEDIC_CREDENTIALS_DIR"):
        return Path(env["TRAINMEDIC_CREDENTIALS_DIR"]).resolve()
    return home(env) / "credentials"


def _telemetry_key(env: Mapping[str, str], role: str | None, *, from_folder: bool) -> TelemetryKey | None:
    """The telemetry key of `role`: a node's parts (`agent`, `executor`) sign with their node's own key,
    else (one machine holding every part) the master; the detector checks with the master, and the
    admin (the broker's super user, on the broker's host) writes with it as any node. Read from
    TRAINMEDIC_TELEMETRY_KEY_FILE, else (when the role's file is the credentials folder's) beside it."""
    given = env.get("TRAINMEDIC_TELEMETRY_KEY_FILE")
    if role not in ("agent", "executor", "detector", "admin") or not (from_folder or given):
        return None
    folder = credentials_dir(env)
    if role == "detector":
        key = env_key(env, folder, MASTER_FILE)
        if key is not None and not key.master:
            raise ConfigError(f"the detector checks telemetry with the master key, and node {key.node}'s own "
                              "was given: give it the broker host's telemetry-master.key")
        return key
    return env_key(env, folder, NODE_FILE) or env_key(env, folder, MASTER_FILE)


class KafkaSettings(BaseModel):
    """How to reach Kafka. librdkafka settings in `extra` pass through unchanged."""

    model_config = ConfigDict(frozen=True, extra="forbid", arbitrary_types_allowed=True)

    bootstrap: str = Field(default=DEFAULT_BOOTSTRAP, min_length=1)
    topic_prefix: str = DEFAULT_PREFIX
    extra: dict[str, str] = Field(default_factory=dict)
    secrets: dict[str, SecretStr] = Field(default_factory=dict)
    # Telemetry's MACs (bus/telemetry_keys.py): a node's own key or the master; None: no tags written
    # (a producer) or checked (the detector).
    telemetry_key: TelemetryKey | None = None

    @field_validator("bootstrap")
    @classmethod
    def _hosts(cls, value: str) -> str:
        for host in value.split(","):
            name, _, port = host.strip().rpartition(":")
            if not name or not port.isdigit():
                raise ValueError(f"{host!r} is not HOST:PORT (bootstrap is a comma-separated list)")
        return value

    @field_validator("topic_prefix")
    @classmethod
    def _prefix(cls, value: str) -> str:
        allowed = set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-")
        if not set(value) <= allowed:
            raise ValueError("topic prefix may hold only letters, digits, '.', '_' and '-'")
        return value

    @classmethod
    def from_env(cls, env: Mapping[str, str] = os.environ, *, role: str | None = None,
                 **overrides: object) -> KafkaSettings:
        """Settings from TRAINMEDIC_* variables; explicit overrides (e.g. CLI flags) win. Without
        TRAINMEDIC_KAFKA_CONFIG, `role`'s credentials file (the local broker's) is used if there is one.
        The settings' `bootstrap.servers` is the bootstrap unless TRAINMEDIC_KAFKA_BOOTSTRAP or an
        override gives one."""
        values: dict[str, object] = {}
        if "TRAINMEDIC_TOPIC_PREFIX" in env:
            values["topic_prefix"] = env["TRAINMEDIC_TOPIC_PREFIX"]
        raw = env.get("TRAINMEDIC_KAFKA_CONFIG")
        if raw:
            try:
                config = json.loads(raw)
            except json.JSONDecodeError as err:
                raise ConfigError(f"TRAINMEDIC_KAFKA_CONFIG is not JSON: {err}") from None
            if not isinstance(config, dict):
                raise ConfigError("TRAINMEDIC_KAFKA_CONFIG must be a JSON object of librdkafka settings")
            config = {str(k): str(v) for k, v in config.items()}
        else:
            config = read_role(credentials_dir(env), role) if role else None
        key = _telemetry_key(env, role, from_folder=not raw)
        if key is not None:
            values["telemetry_key"] = key
        if config:
            if "bootstrap.servers" in config:
                values["bootstrap"] = config.pop("bootstrap.servers")
            values["secrets"] = {k: config.pop(k) for k in SECRET_KEYS if k in config}
            values["extra"] = config
        if "TRAINMEDIC_KAFKA_BOOTSTRAP" in env:
            values["bootstrap"] = env["TRAINMEDIC_KAFKA_BOOTSTRAP"]
        values.update({k: v for k, v in overrides.items() if v is not None})
        try:
            return cls(**values)
        except ValidationError as err:
            first = err.errors(include_url=False)[0]
            raise ConfigError(f"Kafka settings: {first['loc'][0]}: {first['msg']}") from None

    def unanswered(self, timeout_s: float, detail: str) -> str:
        """Why a client of these settings heard no broker, what it tried (address, protocol, CA) and what
        to do: a broker that drops clients without credentials looks the same as none, so settings without
        any say so; a broker on another host is not started from here, so only a loopback one is told
        to `trainmedic broker start`."""
        protocol = self.extra.get("security.protocol", "PLAINTEXT")
        tried = f"security.protocol {protocol}"
        if protocol.upper() in ("SSL", "SASL_SSL"):
            ca = self.extra.get("ssl.ca.location")
            tried += f", TLS with CA file {ca}" if ca else ", TLS with the system's CAs"
        said = f"no Kafka broker answered at {self.bootstrap} within {timeout_s:g}s ({detail}; {tried})"
        none = (f"no credentials were used (no TRAINMEDIC_KAFKA_CONFIG, no role file in {credentials_dir()})"
                if "security.protocol" not in self.extra else "")
        if not _loopback(self.bootstrap):
            tls = (" (a certificate not signed by that CA, or not naming that address, fails the TLS "
                   "handshake)" if "ssl" in protocol.lower() else "")
            return (f"{said}; check that the broker runs on that host, that {self.bootstrap} is reachable "
                    "from here (a firewall; the address the broker advertises, its --advertise), and that "
                    f"the role file and its CA are that broker's{tls}" + (f"; {none}" if none else ""))
        if not none:
            return f"{said}; start one with `trainmedic broker start`"
        return (f"{said}; {none}: if the broker runs, it is a secure one and this is not its "
                "home (set TRAINMEDIC_HOME to the home that started it), else start one with "
                "`trainmedic broker start`")

    @property
    def topics(self) -> Topics:
        return Topics(self.topic_prefix)

    def client_config(self, **defaults: object) -> dict[str, object]:
        """librdkafka configuration: our defaults, then the user's settings on top."""
        config: dict[str, object] = {"bootstrap.servers": self.bootstrap, **defaults}
        config.update(self.extra)
        config.update({k: v.get_secret_value() for k, v in self.secrets.items()})
        return config
