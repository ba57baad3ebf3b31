"""Telemetry MACs: a node's key speaks for that node only; the detector's pipeline refuses the rest."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from confluent_kafka import TIMESTAMP_CREATE_TIME, Message

import trainmedic.schemas as s
from trainmedic.bus import telemetry_keys as tk
from trainmedic.bus.message import RawMessage
from trainmedic.bus.settings import KafkaSettings
from trainmedic.common.errors import ConfigError
from trainmedic.streams.core import Detector
from trainmedic.streams.live import LiveConfig, LiveDetector
from trainmedic.streams.pipeline import Pipeline

TOPICS = s.Topics("mem.")
MASTER = tk.TelemetryKey(bytes(range(32)), None)


def error(ts: float, node: str, job: str = "j1") -> bytes:
    return s.encode(s.WorkerFailed(ts=ts, node=node, job=job, rank=0, world_size=2,
                                   error="RuntimeError: CUDA error: an illegal memory access"))


def signed(key: tk.TelemetryKey, value: bytes, node: str | None = None, prefix: str = TOPICS.prefix):
    return tk.Signer(key, prefix).headers(value, node)


def test_a_node_key_verifies_for_its_node_only_and_its_deployment_only() -> None:
    n1 = tk.for_node(MASTER, "n1")
    verifier = tk.Verifier(MASTER.key, TOPICS.prefix)
    value = error(1.0, "n1")
    headers = signed(n1, value)
    assert verifier.refused(value, "n1", headers) is None
    about_n3 = error(1.0, "n3")
    assert "not written by node 'n3': its tm-mac" in verifier.refused(about_n3, "n3", signed(n1, about_n3))
    elsewhere = tk.Verifier(MASTER.key, "other.")  # another deployment's detector, same master
    assert "not written by node 'n1': its tm-mac" in elsewhere.refused(value, "n1", headers)
    changed = value.replace(b"illegal", b"illegel")
    assert "not written by node 'n1': its tm-mac" in verifier.refused(changed, "n1", headers)
    assert "the record carries no tm-mac" in verifier.refused(value, "n1", None)
    assert verifier.refused(value, "n1", dict(headers)) is None  # Faust gives a mapping
    assert verifier.refused(value, "n1", [("other", b"x"), *headers]) is None  # not only the first header
    other = tk.Verifier(bytes(32), TOPICS.prefix)  # another master
    assert other.refused(value, "n1", headers) is not None
    for odd in (None, "text", b"short"):  # a null header (the clients give None), a str, a short tag
        assert "its tm-mac is another key's" in verifier.refused(value, "n1", [(tk.HEADER, odd)])


def test_made_up_node_names_never_push_out_the_real_nodes_keys(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tk, "MAX_CACHED", 4)
    verifier = tk.Verifier(MASTER.key, TOPICS.prefix)
    value = error(1.0, "n1")
    assert verifier.ok(value, "n1", signed(MASTER, value, "n1"))
    for n in range(20):  # forged names: tagged with nobody's key
        forged = error(1.0, f"made-up-{n}")
        assert not verifier.ok(forged, f"made-up-{n}", [(tk.HEADER, b"x" * 16)])
    assert set(verifier.keys) == {"n1"}


def test_the_master_signs_each_record_with_its_own_nodes_key() -> None:
    verifier = tk.Verifier(MASTER.key, TOPICS.prefix)
    for node in ("n1", "n2"):
        value = error(1.0, node)
        assert verifier.refused(value, node, signed(MASTER, value, node)) is None
    assert signed(MASTER, b"{}", None) == []


def test_key_files_round_trip_private_and_settings_pick_the_roles_key(tmp_path: Path) -> None:
    creds = tmp_path / "credentials"
    tk.write_key(creds / tk.MASTER_FILE, MASTER)
    assert (creds / tk.MASTER_FILE).stat().st_mode & 0o777 == 0o600
    assert tk.read_key(creds / tk.MASTER_FILE) == MASTER
    (creds / "agent.json").write_text(json.dumps({"bootstrap.servers": "h:1"}))
    (creds / "detector.json").write_text(json.dumps({"bootstrap.servers": "h:1"}))
    env = {"TRAINMEDIC_CREDENTIALS_DIR": str(creds)}
    assert KafkaSettings.from_env(env, role="detector").telemetry_key == MASTER
    assert KafkaSettings.from_env(env, role="agent").telemetry_key == MASTER  # one machine: the master
    tk.write_key(creds / tk.NODE_FILE, tk.for_node(MASTER, "n1"))
    assert KafkaSettings.from_env(env, role="agent").telemetry_key.node == "n1"  # its own, when it has one
    assert KafkaSettings.from_env(env, role="operator").telemetry_key is None
    external = {**env, "TRAINMEDIC_KAFKA_CONFIG": "{}"}  # not the folder's role file: not its key
    assert KafkaSettings.from_env(external, role="agent").telemetry_key is None
    (creds / tk.MASTER_FILE).unlink()
    given = {**env, "TRAINMEDIC_TELEMETRY_KEY_FILE": str(creds / tk.NODE_FILE)}
    with pytest.raises(ConfigError, match="master key, and node n1's own"):
        KafkaSettings.from_env(given, role="detector")
    (creds / tk.NODE_FILE).write_text('{"key": "00"}')
    with pytest.raises(ConfigError, match="is not a telemetry key"):
        KafkaSettings.from_env(env, role="agent")


def pipeline(verifier: tk.Verifier | None) -> Pipeline:
    return Pipeline(TOPICS, LiveDetector(Detector(), LiveConfig(lateness_s=0.0)), verifier=verifier)


@pytest.mark.parametrize("way", ["messages", "fetch"])
def test_the_detector_uses_a_nodes_record_only_when_that_node_wrote_it(way: str) -> None:
    """With n1's key, a worker_error about n3, one with no MAC and one whose tm-mac header is null (a
    client may send one) go to the dlq, never to the core, and nothing raises; n1's own records are
    taken (its first through `check`, which learns its key, the next on the fast path). Without a
    verifier (the code before) all five were taken."""
    n1 = tk.for_node(MASTER, "n1")
    values = [(error(10.0, "n1"), "tag"), (error(10.0, "n3", "j2"), "tag"), (error(10.0, "n2", "j3"), None),
              (error(10.0, "n1", "j4"), "null"), (error(10.0, "n1", "j5"), "tag")]
    tags = {"tag": lambda value: signed(n1, value), None: lambda value: None,
            "null": lambda value: [(tk.HEADER, None)]}
    batch = [(RawMessage(TOPICS.worker, 0, offset, 10_000, b"j", value), tags[how](value))
             for offset, (value, how) in enumerate(values)]
    for verifier, taken in ((tk.Verifier(MASTER.key, TOPICS.prefix), 2), (None, 5)):
        run = pipeline(verifier)
        if way == "messages":
            out = run.on_messages([m for m, _ in batch], 10.0, [h for _, h in batch])
        else:
            got = [Message(topic=m.topic, partition=0, offset=m.offset, key=m.key, value=m.value,
                           timestamp=(TIMESTAMP_CREATE_TIME, m.timestamp_ms), headers=h) for m, h in batch]
            out = run.on_fetch(got, 10.0, {}, pytest.fail)
        letters = [s.decode(o.value, s.adapter("dlq")) for o in out if o.topic == TOPICS.dlq]
        assert run.stats.events == taken and len(letters) == 5 - taken
        if verifier is not None:
            assert [letter.offset for letter in letters] == [1, 2, 3]
            assert "not written by node 'n3': its tm-mac" in letters[0].reason
            assert "the record carries no tm-mac" in letters[1].reason


def test_a_record_with_many_tags_is_hashed_once(monkeypatch) -> None:
    import trainmedic.bus.telemetry_keys as keys

    calls = []
    real = keys.tag_of
    monkeypatch.setattr(keys, "tag_of", lambda state, value: calls.append(1) or real(state, value))
    verifier = keys.Verifier(bytes(32), "p.")
    assert not verifier.ok(b"x" * 100_000, "n1", [(keys.HEADER, bytes(16))] * 1_000)
    assert len(calls) == 1
