"""A node rotates its key in place (issue 45, point 4), on the real broker: `trainmedic keys rotate
--node n1` announces the new key on acks, signed by the old one, before it writes it; the running
executor signs its next report with the new key, without a restart. Before, a node's rotation had
its new .pub copied to the coordinator's host by hand and its executor restarted."""

from __future__ import annotations

import time

import pytest

from tests.integration.executor.conftest import KEY
from tests.integration.executor.test_job_settings import settled
from trainmedic import cli
from trainmedic.bus.settings import KafkaSettings
from trainmedic.recovery import keyring
from trainmedic.recovery.signing import TrustedKeys
from trainmedic.schemas import encode


def signed_by(report, key) -> bool:
    return TrustedKeys.of(key.private.public_key()).check(encode(report), "report") is None


@pytest.mark.kafka
def test_a_node_key_rotated_is_announced_by_the_old_key_and_signs_the_next_report(
        start_executor, send, events, kafka: KafkaSettings, tmp_path, monkeypatch) -> None:
    keys, role = tmp_path / "keys", keyring.node_role("n1")
    keyring.generate_key(keys, time.time(), role)
    keyring.trust_public(keys, KEY.private.public_key(), keyring.COORDINATOR, time.time())
    old = keyring.load_signing(keys, role)
    start_executor("n1", keys_dir=keys, node_key=old)
    monkeypatch.setenv("TRAINMEDIC_TOPIC_PREFIX", kafka.topic_prefix)
    assert cli.main(["keys", "rotate", "--node", "n1", "--keys-dir", str(keys)]) == 0
    new = keyring.load_signing(keys, role)
    assert new.key_id != old.key_id and not (keys / f"{old.key_id}.key").exists()

    rotated = events.wait_for(lambda e: e.type == "node_key_rotated" and e.node == "n1")
    assert rotated.key.key_id == new.key_id and signed_by(rotated, old)
    settled(send, events)  # a stop of a job n1 never ran: acked after the rotation
    marker = [e for e in events.seen if e.type == "ack" and e.command_id.startswith("marker-")][-1]
    assert signed_by(marker, new) and not signed_by(marker, old) and marker.status == "done"


@pytest.mark.kafka
def test_a_rotation_kafka_does_not_take_changes_nothing(tmp_path, monkeypatch, capsys) -> None:
    keys, role = tmp_path / "keys", keyring.node_role("n1")
    keyring.generate_key(keys, time.time(), role)
    before = keyring.load_signing(keys, role).key_id
    monkeypatch.setenv("TRAINMEDIC_KAFKA_BOOTSTRAP", "127.0.0.1:1")  # no broker there
    monkeypatch.setenv("TRAINMEDIC_KAFKA_CONFIG", '{"message.timeout.ms": 2000}')
    assert cli.main(["keys", "rotate", "--node", "n1", "--keys-dir", str(keys)]) == 1
    assert keyring.load_signing(keys, role).key_id == before  # still the node's: never announced
    assert "trainmedic keys:" in capsys.readouterr().err
