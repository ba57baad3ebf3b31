"""`trainmedic node` runs two Kafka principals, its executor's and its agent's (issue 44): one
TRAINMEDIC_KAFKA_CONFIG naming a principal would give both the same, and the broker's ACLs refuse one of
them. The node refuses it at start, saying to use a credentials folder; settings with no principal pass."""

from __future__ import annotations

import json

import pytest

from trainmedic.cli import main
from trainmedic.node import shared_principal


@pytest.mark.parametrize("config", [
    {"security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-512", "sasl.username": "executor",
     "sasl.password": "hunter2"},
    {"security.protocol": "SSL", "ssl.certificate.location": "/etc/tm/n01.pem",
     "ssl.key.location": "/etc/tm/n01.key"},
])
def test_one_principal_for_both_parts_stops_the_node_at_start(config, monkeypatch, capsys, tmp_path) -> None:
    monkeypatch.setenv("TRAINMEDIC_HOME", str(tmp_path))
    monkeypatch.setenv("TRAINMEDIC_KAFKA_CONFIG", json.dumps(config))
    assert main(["node", "--node", "n01", "--insecure", "--bootstrap", "127.0.0.1:1"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("trainmedic node: TRAINMEDIC_KAFKA_CONFIG names one Kafka "
                                               "principal (")
    assert "the executor and the agent" in err[0] and "TRAINMEDIC_CREDENTIALS_DIR" in err[0]
    assert "executor.json and agent.json" in err[0] and "hunter2" not in err[0]  # names, never values


@pytest.mark.parametrize("raw", [None, "", "{}", '{"message.timeout.ms": "100"}',
                                 '{"security.protocol": "SSL", "ssl.ca.location": "/etc/tm/ca.pem"}'])
def test_settings_that_name_no_principal_are_not_refused(raw) -> None:
    assert shared_principal({} if raw is None else {"TRAINMEDIC_KAFKA_CONFIG": raw}) is None
