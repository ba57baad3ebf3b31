"""The local broker's authentication: SCRAM users per role, the authorizer, the role files, the
passwords in broker/secrets.json (docs/security.md, "Broker authentication and ACLs").
"""

from __future__ import annotations

import hashlib
import json
import os
import secrets
from pathlib import Path

from trainmedic.bus.acls import ADMIN, ROLES
from trainmedic.bus.telemetry_keys import TelemetryKey
from trainmedic.local.broker_listen import Listener

MECHANISM = "SCRAM-SHA-512"
CONTROLLER = "controller"  # the controller listener's PLAIN password's key in secrets.json
TELEMETRY = "telemetry"  # the secret the telemetry master key is made from (bus/telemetry_keys.py)


def read_secrets(path: Path) -> dict[str, str] | None:
    """The passwords kept in `path`, or None before the broker was first secure."""
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        return None


def complete(found: dict[str, str]) -> dict[str, str]:
    """`found` with a new random password for every role (and the controller listener) it lacks."""
    return {name: found.get(name) or secrets.token_urlsafe(24) for name in (*ROLES, CONTROLLER, TELEMETRY)}


def telemetry_master(passwords: dict[str, str]) -> TelemetryKey:
    """The deployment's telemetry master key, made from its secret in secrets.json (a cluster's
    members share that file, and so the key)."""
    return TelemetryKey(hashlib.sha256(passwords[TELEMETRY].encode()).digest(), None)


def write_private(path: Path, text: str) -> None:
    """Write `text` to `path` readable by its owner only (it holds passwords)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as out:
        out.write(text)
    path.chmod(0o600)


def role_config(role: str, password: str, *, bootstrap: str | None = None,
                ca: str | None = None) -> dict[str, str]:
    """The librdkafka settings a client of `role` authenticates with; with `bootstrap`, where the broker
    is; with `ca` (the CA file, "ca.pem" beside the role file), over TLS with host names verified."""
    config = {"bootstrap.servers": bootstrap} if bootstrap else {}
    config |= {"security.protocol": "SASL_SSL" if ca else "SASL_PLAINTEXT", "sasl.mechanism": MECHANISM,
               "sasl.username": role, "sasl.password": password}
    if ca:
        config |= {"ssl.ca.location": ca, "ssl.endpoint.identification.algorithm": "https"}
    return config


def client_properties(admin_password: str | None, ca: Path | None = None) -> str:
    """A Java client's settings (Kafka's own tools) as the admin, over TLS trusting `ca` when given;
    None: a plain broker, none."""
    if admin_password is None:
        return ""
    scram = "org.apache.kafka.common.security.scram.ScramLoginModule"
    tls = (f"ssl.truststore.type=PEM\nssl.truststore.location={ca}\n"
           "ssl.endpoint.identification.algorithm=https\n") if ca else ""
    return (f"security.protocol={'SASL_SSL' if ca else 'SASL_PLAINTEXT'}\nsasl.mechanism={MECHANISM}\n"
            f'sasl.jaas.config={scram} required username="{ADMIN}" password="{admin_password}";\n{tls}')


def add_scram_argument(passwords: dict[str, str]) -> list[str]:
    """StorageTool's arguments that put the admin's SCRAM credential into freshly formatted storage."""
    return ["--add-scram", f"{MECHANISM}=[name={ADMIN},password={passwords[ADMIN]}]"]


def listener_properties(listener: Listener, passwords: dict[str, str] | None) -> str:
    """Listeners and, with `passwords`, SASL and the authorizer (None: plain, no authorizer). The
    client listener is also the inter-broker one; on a TLS `listener` every listener is SASL_SSL."""
    name = listener.protocol(passwords is not None)
    lines = f"""\
listeners={name}://{listener.listen},CONTROLLER://{listener.controller}
advertised.listeners={name}://{listener.bootstrap}
inter.broker.listener.name={name}
listener.security.protocol.map=CONTROLLER:{name},{name}:{name}
"""
    if passwords is None:
        return lines
    admin, plain_password = passwords[ADMIN], passwords[CONTROLLER]
    scram = "org.apache.kafka.common.security.scram.ScramLoginModule"
    plain = "org.apache.kafka.common.security.plain.PlainLoginModule"
    return f"""{lines}\
sasl.enabled.mechanisms={MECHANISM}
sasl.mechanism.inter.broker.protocol={MECHANISM}
listener.name.{name.lower()}.scram-sha-512.sasl.jaas.config={scram} required \\
    username="{ADMIN}" password="{admin}";
sasl.mechanism.controller.protocol=PLAIN
listener.name.controller.sasl.enabled.mechanisms=PLAIN
listener.name.controller.plain.sasl.jaas.config={plain} required \\
    username="{ADMIN}" password="{plain_password}" user_{ADMIN}="{plain_password}";
authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer
allow.everyone.if.no.acl.found=false
super.users=User:{ADMIN}
"""
