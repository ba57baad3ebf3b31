"""The docker-compose stack is secure by default (no Docker engine here: the files are checked as
data): nothing published beyond 127.0.0.1, no default Grafana password and no anonymous access, a
broker that answers only SASL with the authorizer on, nothing run as root, an image built from the
lock, and the same limits and quotas as the local broker."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

from trainmedic.local.broker_limits import QUOTAS, Connections

COMPOSE = Path(__file__).resolve().parents[2] / "compose"
STACK = yaml.safe_load((COMPOSE / "docker-compose.yml").read_text())
SERVICES = STACK["services"]
KAFKA = SERVICES["kafka"]["environment"]


def test_nothing_is_published_beyond_this_machine() -> None:
    published = {name: s.get("ports", []) for name, s in SERVICES.items()}
    assert all(port.startswith("127.0.0.1:") for ports in published.values() for port in ports), published
    assert {name for name, ports in published.items() if ports} == {"kafka", "alertmanager", "prometheus",
                                                                    "grafana"}
    assert SERVICES["kafka"]["ports"] == ["127.0.0.1:9092:9092"]  # the HOST (SCRAM) listener only


def test_services_talk_on_an_internal_network_and_only_published_ones_are_on_the_edge() -> None:
    assert STACK["networks"]["backend"]["internal"] is True
    assert all("backend" in s["networks"] for s in SERVICES.values())
    assert all("ports" in s or "edge" not in s["networks"] for s in SERVICES.values())


def test_grafana_has_no_default_password_and_no_anonymous_access() -> None:
    grafana = SERVICES["grafana"]["environment"]
    assert grafana["GF_SECURITY_ADMIN_PASSWORD"].startswith("${GRAFANA_ADMIN_PASSWORD:?")  # must be set
    assert grafana["GF_AUTH_ANONYMOUS_ENABLED"] == "false" and grafana["GF_USERS_ALLOW_SIGN_UP"] == "false"
    assert grafana["GF_SECURITY_ADMIN_PASSWORD"] != "admin"


def test_the_broker_answers_only_sasl_with_the_authorizer_on() -> None:
    protocols = KAFKA["KAFKA_LISTENER_SECURITY_PROTOCOL_MAP"].split(",")
    listeners = dict(entry.split(":", 1) for entry in protocols)
    named = {entry.split("://")[0] for entry in KAFKA["KAFKA_LISTENERS"].split(",")}
    assert set(listeners) == named and set(listeners.values()) == {"SASL_PLAINTEXT"}
    assert KAFKA["KAFKA_LISTENER_NAME_HOST_SASL_ENABLED_MECHANISMS"] == "SCRAM-SHA-512"
    assert KAFKA["KAFKA_LISTENER_NAME_DOCKER_SASL_ENABLED_MECHANISMS"] == "SCRAM-SHA-512"
    assert KAFKA["KAFKA_AUTHORIZER_CLASS_NAME"].endswith("StandardAuthorizer")
    assert KAFKA["KAFKA_ALLOW_EVERYONE_IF_NO_ACL_FOUND"] == "false"
    assert KAFKA["KAFKA_SUPER_USERS"] == "User:admin"
    jaas = KAFKA["KAFKA_LISTENER_NAME_INTERNAL_PLAIN_SASL_JAAS_CONFIG"]
    assert 'password="${TRAINMEDIC_KAFKA_ADMIN_PASSWORD:?' in jaas  # no password in the file
    assert SERVICES["kafka-init"]["command"] == ["python", "/app/compose/kafka_init.py"]
    assert SERVICES["alerts"]["environment"]["TRAINMEDIC_CREDENTIALS_DIR"] == "/credentials"


def test_the_broker_has_the_local_brokers_connection_caps_and_quotas() -> None:
    caps = Connections()
    assert KAFKA["KAFKA_MAX_CONNECTIONS_PER_IP"] == caps.per_ip
    assert KAFKA["KAFKA_MAX_CONNECTIONS"] == caps.total
    assert KAFKA["KAFKA_LISTENER_NAME_INTERNAL_MAX_CONNECTIONS"] == caps.total
    assert KAFKA["KAFKA_CONNECTION_FAILED_AUTHENTICATION_DELAY_MS"] == caps.failed_auth_delay_ms
    script = SERVICES["kafka-quotas"]["command"][0]
    assert f"--entity-default --add-config {QUOTAS[None].config()}" in script
    bounded = re.search(r"for user in ([a-z ]+); do\n\s+quota --entity-name \"\$\$user\" --add-config (\S+)",
                        script)
    assert bounded is not None
    assert {user: bounded[2] for user in bounded[1].split()} == {
        user: quota.config() for user, quota in QUOTAS.items() if user is not None}


def test_nothing_runs_as_root_and_the_image_is_built_from_the_lock() -> None:
    users = {name: s.get("user") for name, s in SERVICES.items()}
    assert all(user and user.split(":")[0] not in ("0", "root") for user in users.values()), users
    dockerfile = (COMPOSE / "Dockerfile").read_text()
    assert "requirements.lock > /tmp/requirements.txt" in dockerfile
    assert "pip install --no-cache-dir --no-deps -r /tmp/requirements.txt" in dockerfile
    assert re.search(r"^USER 10001", dockerfile, re.M) and "COPY bus bus" in dockerfile
    built = [name for name, s in SERVICES.items() if "build" in s]
    assert built and all(SERVICES[name]["user"] == "10001:10001" for name in built)
