"""Who may do what on Kafka (bus/acls.py), where each service finds its credentials, and the
secure broker's configuration, without a broker."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest
from confluent_kafka.admin import AclOperation, ResourcePatternType, ResourceType

from trainmedic.bus.acls import CONTRACT, GRANTS, bindings, filters
from trainmedic.bus.credentials import read_role, write_roles
from trainmedic.bus.settings import KafkaSettings, credentials_dir
from trainmedic.common.errors import ConfigError
from trainmedic.local.broker_auth import complete
from trainmedic.local.broker_config import server_properties
from trainmedic.schemas.topics import SPECS
from trainmedic.streams.engines.faust_app import faust_credentials

PREFIX = "acme."


def may(operation: AclOperation, suffix: str) -> set[str]:
    """The principals allowed `operation` on the topic `{PREFIX}{suffix}`."""
    return {b.principal.removeprefix("User:") for b in bindings(PREFIX)
            if b.restype == ResourceType.TOPIC and b.operation == operation
            and (b.name == PREFIX + suffix if b.resource_pattern_type == ResourcePatternType.LITERAL
                 else (PREFIX + suffix).startswith(b.name))}


def test_each_contract_topic_has_the_writers_of_the_architecture_and_no_other() -> None:
    writers = {suffix: may(AclOperation.WRITE, suffix) for suffix in CONTRACT}
    assert writers == {
        "telemetry.gpu": {"agent"}, "telemetry.node": {"agent"}, "telemetry.worker": {"executor"},
        "incidents": {"detector"},
        "recovery": {"coordinator"}, "jobs": {"operator"}, "nodes": {"operator"},
        "commands": {"coordinator"}, "acks": {"executor"}, "alerts": {"ops"},
        "dlq": {"detector", "coordinator", "executor", "ops"},
    }


def test_readers_are_the_consumers_of_each_topic() -> None:
    assert may(AclOperation.READ, "commands") == {"coordinator", "executor", "operator"}
    assert may(AclOperation.READ, "telemetry.gpu") == {"detector", "operator"}
    assert may(AclOperation.READ, "recovery") == {"coordinator", "ops", "operator"}
    assert may(AclOperation.READ, "jobs") == {"coordinator", "operator"}
    assert may(AclOperation.READ, "detector-checkpoints") == {"detector"}
    assert may(AclOperation.CREATE, "detector-checkpoints") == {"detector"}
    assert may(AclOperation.CREATE, "coordinator-lease") == {"coordinator"}
    assert not may(AclOperation.CREATE, "commands")  # contract topics are the admin's to create


def test_every_topic_of_the_contract_is_in_the_table() -> None:
    assert {spec.suffix for spec in SPECS} <= set(CONTRACT)


def test_bindings_stay_under_the_prefix_and_the_filters_match_them_all() -> None:
    made = bindings(PREFIX)
    assert all(b.name.startswith(PREFIX) for b in made)
    assert "admin" not in {b.principal for b in made}  # the super user needs none
    # the coordinator's decisions, and a sharded detector's ingest instances (`acme.detector-ingest-*`)
    assert {(b.name, b.principal) for b in made if b.restype == ResourceType.TRANSACTIONAL_ID} == {
        ("acme.coordinator", "User:coordinator"), ("acme.detector", "User:detector")}
    keys = {(f.restype, f.name, f.resource_pattern_type, f.principal) for f in filters(PREFIX)}
    assert keys == {(b.restype, b.name, b.resource_pattern_type, b.principal) for b in made}
    assert len(made) == sum(len(g.operations) for grants in GRANTS.values() for g in grants)


def test_a_role_file_is_what_a_service_reads_unless_kafka_config_is_set(tmp_path: Path) -> None:
    folder = tmp_path / "credentials"
    folder.mkdir()
    (folder / "stale.json").write_text("{}")
    write_roles(folder, {"agent": {"security.protocol": "SASL_PLAINTEXT", "sasl.username": "agent",
                                   "sasl.password": "pw"}})
    assert [p.name for p in folder.iterdir()] == ["agent.json"]  # the stale one is gone
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700
    assert stat.S_IMODE((folder / "agent.json").stat().st_mode) == 0o600
    env = {"TRAINMEDIC_CREDENTIALS_DIR": str(folder)}
    settings = KafkaSettings.from_env(env, role="agent")
    assert settings.client_config()["sasl.password"] == "pw"
    assert "pw" not in repr(settings)
    assert KafkaSettings.from_env(env, role="ops").extra == {}  # no file for it: plain
    assert KafkaSettings.from_env(env).extra == {}  # no role: no file
    external = {**env, "TRAINMEDIC_KAFKA_CONFIG": '{"sasl.username": "mine"}'}
    assert KafkaSettings.from_env(external, role="agent").extra == {"sasl.username": "mine"}


def test_the_credentials_folder_follows_the_home_unless_named(tmp_path: Path) -> None:
    assert credentials_dir({"TRAINMEDIC_HOME": str(tmp_path)}) == tmp_path / "credentials"
    assert credentials_dir({"TRAINMEDIC_HOME": "x", "TRAINMEDIC_CREDENTIALS_DIR": str(tmp_path)}) == tmp_path


def test_a_broken_role_file_is_a_clear_error(tmp_path: Path) -> None:
    (tmp_path / "agent.json").write_text("[1]")
    with pytest.raises(ConfigError, match="agent.json must be a JSON object"):
        read_role(tmp_path, "agent")
    (tmp_path / "agent.json").write_text("{")
    with pytest.raises(ConfigError, match="cannot read the Kafka credentials"):
        KafkaSettings.from_env({"TRAINMEDIC_CREDENTIALS_DIR": str(tmp_path)}, role="agent")


def test_the_secure_broker_authenticates_every_listener_and_authorizes(tmp_path: Path) -> None:
    props = server_properties(tmp_path / "d", 19092, 19093, complete({}))
    assert "listeners=SASL_PLAINTEXT://127.0.0.1:19092,CONTROLLER://127.0.0.1:19093" in props
    assert "inter.broker.listener.name=SASL_PLAINTEXT" in props  # transaction markers authenticate too
    assert "CONTROLLER:SASL_PLAINTEXT" in props
    assert "authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer" in props
    assert "allow.everyone.if.no.acl.found=false" in props
    assert "super.users=User:admin\n" in props
    assert "authorizer" not in server_properties(tmp_path / "d", 19092, 19093)  # --insecure


def test_passwords_are_made_once_per_role() -> None:
    first = complete({})
    assert set(first) == {*GRANTS, "admin", "controller", "telemetry"}
    assert len(set(first.values())) == len(first)
    assert complete(first) == first
    assert complete({"agent": "kept"})["agent"] == "kept"
    assert "rank" not in complete({"rank": "retired"})  # a retired role's password is not kept


def test_faust_authenticates_as_librdkafka_does() -> None:
    assert faust_credentials(KafkaSettings()) is None
    scram = KafkaSettings(extra={"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "SCRAM-SHA-512",
                                 "sasl.username": "detector"}, secrets={"sasl.password": "pw"})
    creds = faust_credentials(scram)
    assert (creds.username, creds.password, creds.mechanism.value) == ("detector", "pw", "SCRAM-SHA-512")
    assert creds.protocol.value == "SASL_PLAINTEXT"
    with pytest.raises(ConfigError, match="cannot authenticate with security.protocol=SASL_PLAINTEXT"):
        faust_credentials(KafkaSettings(extra={"security.protocol": "SASL_PLAINTEXT",
                                               "sasl.mechanism": "GSSAPI"}))
