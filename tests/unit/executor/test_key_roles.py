"""Explicit key roles and revocation (issue 45, Deliver 4 and 5): a key is trusted only for the role it
was trusted for; an ID.pub with no role (a node's key copied into an executor's folder by mistake) is
trusted for nothing; an old folder is migrated once; a revoked key is refused as `revoked`, even when
its ID.pub is copied in again."""

from __future__ import annotations

import json
import logging
import shutil

import pytest

from trainmedic.bus.message import Record
from trainmedic.common.errors import ConfigError
from trainmedic.recovery import keyring
from trainmedic.recovery.coordinator.provenance import Trust, unverified
from trainmedic.recovery.key_folders import KeyFolder
from trainmedic.recovery.signing import Unverified
from trainmedic.schemas import Command, CommandAcked, CommandAction, encode


def command(ts: float = 1.0) -> Command:
    return Command(ts=ts, node="n1", id="c1", job="j", generation=0, action=CommandAction.STOP)


def warnings_naming(caplog, key_id: str) -> list[str]:
    return [r.getMessage() for r in caplog.records
            if r.levelno == logging.WARNING and key_id in r.getMessage()]


def test_a_node_key_copied_by_hand_into_an_executors_folder_never_signs_a_command(tmp_path, caplog):
    coordinator = keyring.generate_key(tmp_path / "coordinator", now=1.0)
    n2 = keyring.generate_key(tmp_path / "n2", now=1.0, role=keyring.node_role("n2"))
    executor = tmp_path / "n1"
    keyring.trust_key(executor, tmp_path / "coordinator" / f"{coordinator}.pub", keyring.COORDINATOR, now=2.0)
    shutil.copy(tmp_path / "n2" / f"{n2}.pub", executor)  # the mistake: n2's key, no role
    forged = encode(keyring.load_signing(tmp_path / "n2", "node:n2").sign(command()))
    caplog.set_level(logging.WARNING)
    trusted = keyring.load_trusted(executor)
    assert set(trusted.keys) == {coordinator}
    assert trusted.check(forged).startswith(f"unknown key id '{n2}'")
    assert all(n2 not in keys.keys for keys in keyring.load_roles(executor).values())
    [warning] = warnings_naming(caplog, n2)  # once, though loaded twice
    assert f"{executor / (n2 + '.pub')}" in warning and "trusted for nothing" in warning
    assert f"trainmedic keys trust {executor / (n2 + '.pub')} --role coordinator" in warning
    listed = {(k.key_id, k.role) for k in keyring.list_keys(executor)}
    assert listed == {(coordinator, "coordinator"), (n2, None)}


def test_trust_records_every_role_a_coordinator_key_included(tmp_path):
    coordinator = keyring.generate_key(tmp_path / "coordinator", now=1.0)
    keyring.trust_key(tmp_path / "n1", tmp_path / "coordinator" / f"{coordinator}.pub", "coordinator",
                      now=2.0)
    for folder in ("coordinator", "n1"):
        manifest = json.loads((tmp_path / folder / keyring.MANIFEST).read_text())
        assert manifest["roles"] == {coordinator: "coordinator"} and manifest["version"] == 2


def test_a_folder_written_before_roles_is_migrated_once_naming_each_key_it_gave_a_role(tmp_path, caplog):
    old = keyring.generate_key(tmp_path, now=1.0)
    _, new = keyring.rotate_key(tmp_path, now=2.0)
    operator = keyring.generate_key(tmp_path, now=3.0, role=keyring.OPERATOR)
    stray = keyring.generate_key(tmp_path / "n9", now=4.0, role=keyring.node_role("n9"))
    shutil.copy(tmp_path / "n9" / f"{stray}.pub", tmp_path)  # copied by hand before the upgrade
    (tmp_path / keyring.MANIFEST).write_text(json.dumps({  # as the code before roles wrote it
        "signing": new, "signers": {"operator": operator}, "roles": {operator: "operator"},
        "created": {old: 1.0, new: 2.0, operator: 3.0}}))
    caplog.set_level(logging.WARNING)
    roles = keyring.load_roles(tmp_path)
    assert {role: set(keys.keys) for role, keys in roles.items()} == {
        "coordinator": {old, new}, "operator": {operator}}
    manifest = json.loads((tmp_path / keyring.MANIFEST).read_text())
    assert manifest["version"] == 2 and manifest["roles"] == {
        old: "coordinator", new: "coordinator", operator: "operator"}
    assert len(warnings_naming(caplog, old)) == len(warnings_naming(caplog, new)) == 1
    assert "migrated" in warnings_naming(caplog, new)[0] and "signing key" in warnings_naming(caplog, new)[0]
    assert not [m for m in warnings_naming(caplog, operator) if "migrated" in m]
    caplog.clear()
    later = keyring.generate_key(tmp_path / "n8", now=5.0, role=keyring.node_role("n8"))
    shutil.copy(tmp_path / "n8" / f"{later}.pub", tmp_path)  # copied by hand after the migration
    assert set(keyring.load_trusted(tmp_path).keys) == {old, new}
    assert not [r for r in caplog.records if "migrated" in r.getMessage()]
    assert json.loads((tmp_path / keyring.MANIFEST).read_text())["roles"] == manifest["roles"]
    assert keyring.load_signing(tmp_path).key_id == new


def test_a_revoked_key_is_refused_as_revoked_even_when_copied_in_again(tmp_path):
    keyring.generate_key(tmp_path / "coordinator", now=1.0)
    old_signer = keyring.load_signing(tmp_path / "coordinator")
    signed_by_old = encode(old_signer.sign(command()))
    old, new = keyring.rotate_key(tmp_path / "coordinator", now=2.0)
    executor = tmp_path / "n1"
    for key_id in (old, new):
        keyring.trust_key(executor, tmp_path / "coordinator" / f"{key_id}.pub", keyring.COORDINATOR, now=3.0)
    folder = KeyFolder(executor, keyring.load_trusted(executor))
    assert folder.trusted().check(signed_by_old) is None
    revoked = keyring.revoke_key(executor, old, now=10.0)
    assert (revoked.key_id, revoked.role, revoked.at, revoked.private_deleted) == (
        old, "coordinator", 10.0, False)
    with pytest.raises(Unverified) as refused:
        folder.trusted().signer(signed_by_old)
    assert refused.value.kind == "revoked" and str(refused.value) == f"revoked key id '{old}'"
    assert set(folder.trusted().keys) == {new} and not (executor / f"{old}.pub").exists()
    shutil.copy(tmp_path / "coordinator" / f"{old}.pub", executor)  # copied in again
    assert folder.trusted().check(signed_by_old) == f"revoked key id '{old}'"
    with pytest.raises(ConfigError, match="was revoked here"):
        keyring.trust_key(executor, tmp_path / "coordinator" / f"{old}.pub", keyring.COORDINATOR, now=11.0)
    assert json.loads((executor / keyring.MANIFEST).read_text())["revoked"] == {
        old: {"role": "coordinator", "at": 10.0}}
    assert {(k.key_id, k.role, k.revoked) for k in keyring.list_keys(executor)} == {
        (old, "coordinator", 10.0), (new, "coordinator", None)}


def test_the_coordinator_refuses_an_ack_by_a_revoked_node_key_as_revoked(tmp_path):
    keyring.generate_key(tmp_path, now=1.0)
    keyring.generate_key(tmp_path, now=1.0, role=keyring.OPERATOR)
    n1 = keyring.generate_key(tmp_path, now=1.0, role=keyring.node_role("n1"))
    ack = keyring.load_signing(tmp_path, "node:n1").sign(
        CommandAcked(ts=2.0, node="n1", command_id="c1", job="j", generation=0, status="failed"))
    record = Record("t", 0, 0, None, ack, encode(ack))
    assert unverified(record, Trust.of(keyring.load_roles(tmp_path))) is None
    keyring.revoke_key(tmp_path, n1, now=3.0, force=True)
    why = unverified(record, Trust.of(keyring.load_roles(tmp_path)))
    assert why is not None and why.kind == "revoked" and f"revoked key id '{n1}'" in str(why)


def test_revoking_a_roles_signing_key_needs_force_and_deletes_its_private_key(tmp_path):
    operator = keyring.generate_key(tmp_path, now=1.0, role=keyring.OPERATOR)
    with pytest.raises(ConfigError, match=r"operator signing key .*keys rotate --role operator.*--force"):
        keyring.revoke_key(tmp_path, operator, now=2.0)
    assert keyring.load_signing(tmp_path, keyring.OPERATOR).key_id == operator
    assert keyring.revoke_key(tmp_path, operator, now=2.0, force=True).private_deleted
    assert not (tmp_path / f"{operator}.key").exists() and not (tmp_path / f"{operator}.pub").exists()
    with pytest.raises(ConfigError, match="no operator key"):
        keyring.load_signing(tmp_path, keyring.OPERATOR)
    assert keyring.generate_key(tmp_path, now=3.0, role=keyring.OPERATOR) != operator
    with pytest.raises(ConfigError, match="no key 0123456789abcdef"):
        keyring.revoke_key(tmp_path, "0123456789abcdef", now=4.0)


def test_rotate_then_revoke_the_old_key_signs_throughout(tmp_path):
    coordinator, executor = tmp_path / "coordinator", tmp_path / "n1"
    first = keyring.generate_key(coordinator, now=1.0)
    keyring.trust_key(executor, coordinator / f"{first}.pub", keyring.COORDINATOR, now=1.0)
    folder = KeyFolder(executor, keyring.load_trusted(executor))
    in_flight = encode(keyring.load_signing(coordinator).sign(command(ts=1.0)))
    _, second = keyring.rotate_key(coordinator, now=2.0)
    keyring.trust_key(executor, coordinator / f"{second}.pub", keyring.COORDINATOR, now=2.0)
    after = encode(keyring.load_signing(coordinator).sign(command(ts=2.0)))
    assert folder.trusted().check(in_flight) is None and folder.trusted().check(after) is None
    for where in (executor, coordinator):  # past freshness: the old key retired everywhere, no --force
        keyring.revoke_key(where, first, now=100.0)
    assert folder.trusted().check(after) is None and folder.trusted().check(in_flight).startswith("revoked")
    assert keyring.load_signing(coordinator).key_id == second
    assert set(keyring.load_roles(coordinator)["coordinator"].keys) == {second}


def test_revoking_the_only_coordinator_key_of_an_executor_refuses_its_commands_at_once(tmp_path, caplog):
    coordinator, executor = tmp_path / "coordinator", tmp_path / "n1"
    only = keyring.generate_key(coordinator, now=1.0)
    keyring.trust_key(executor, coordinator / f"{only}.pub", keyring.COORDINATOR, now=1.0)
    folder = KeyFolder(executor, keyring.load_trusted(executor))  # as the executor's applier
    signed = encode(keyring.load_signing(coordinator).sign(command()))
    assert folder.trusted().check(signed) is None
    caplog.set_level(logging.ERROR)
    keyring.revoke_key(executor, only, now=5.0)  # stolen: its role is left with no key here
    assert folder.trusted().check(signed) == f"revoked key id '{only}'"
    assert any("no trusted command keys left" in r.getMessage() for r in caplog.records)
    keyring.revoke_key(coordinator, only, now=5.0, force=True)
    new = keyring.generate_key(coordinator, now=6.0)
    keyring.trust_key(executor, coordinator / f"{new}.pub", keyring.COORDINATOR, now=6.0)
    assert folder.trusted().check(encode(keyring.load_signing(coordinator).sign(command()))) is None
    assert folder.trusted().check(signed) == f"revoked key id '{only}'"


def test_revoking_the_coordinators_only_operator_key_refuses_its_jobs_and_node_events_at_once(tmp_path):
    from types import SimpleNamespace

    from trainmedic.recovery.coordinator import cli
    from trainmedic.schemas.nodes import NodeCordoned

    keyring.generate_key(tmp_path, now=1.0)
    operator = keyring.generate_key(tmp_path, now=1.0, role=keyring.OPERATOR)
    _, trust = cli.load_keys(SimpleNamespace(keys_dir=tmp_path, nodes=[]))  # as the coordinator starts
    cordon = keyring.load_signing(tmp_path, keyring.OPERATOR).sign(NodeCordoned(ts=1.0, node="n1"))
    record = Record("t", 0, 0, None, cordon, encode(cordon))
    assert unverified(record, trust()) is None
    keyring.revoke_key(tmp_path, operator, now=2.0, force=True)  # stolen
    why = unverified(record, trust())
    assert why is not None and why.kind == "revoked" and not trust().operators.keys


def test_a_folder_that_does_not_load_keeps_its_keys_but_those_revoked_since(tmp_path):
    coordinator, executor = tmp_path / "coordinator", tmp_path / "n1"
    first = keyring.generate_key(coordinator, now=1.0)
    by_first = encode(keyring.load_signing(coordinator).sign(command()))
    _, second = keyring.rotate_key(coordinator, now=2.0)
    _, third = keyring.rotate_key(coordinator, now=3.0)
    for key_id in (first, second):
        keyring.trust_key(executor, coordinator / f"{key_id}.pub", keyring.COORDINATOR, now=3.0)
    folder = KeyFolder(executor, keyring.load_trusted(executor))
    assert set(folder.trusted().keys) == {first, second}

    def never(directory):
        raise ConfigError("unreadable")

    coordinators = KeyFolder(executor, Trust.of(keyring.load_roles(executor)), never)  # as a Trust
    keyring.trust_key(executor, coordinator / f"{third}.pub", keyring.COORDINATOR, now=4.0)
    (executor / f"{third}.pub").write_text("half copied")
    assert set(folder.trusted().keys) == {first, second}  # kept
    keyring.revoke_key(executor, first, now=5.0)  # while the folder still does not load
    assert set(folder.trusted().keys) == {second} and folder.trusted().check(by_first).startswith("revoked")
    assert set(coordinators.trusted().own.keys) == {second}
    assert first in coordinators.trusted().own.revoked


def test_a_migration_at_a_first_read_never_undoes_a_revocation_made_meanwhile(tmp_path, monkeypatch):
    import threading

    from trainmedic.recovery import key_manifest

    old = keyring.generate_key(tmp_path, now=1.0)
    _, new = keyring.rotate_key(tmp_path, now=2.0)
    (tmp_path / keyring.MANIFEST).write_text(json.dumps({"signing": new, "created": {old: 1.0, new: 2.0}}))
    save, revoking = key_manifest.save, []

    def slow_save(directory, manifest):  # the reader's migration, about to write: `keys revoke` runs
        if not revoking:
            revoking.append(threading.Thread(target=keyring.revoke_key, args=(tmp_path, old, 3.0)))
            revoking[0].start()
            revoking[0].join(0.5)  # it waits for the folder's lock (before: it revoked, and was undone)
        save(directory, manifest)

    monkeypatch.setattr(key_manifest, "save", slow_save)
    keyring.load_roles(tmp_path)  # an executor's first read
    revoking[0].join(5.0)
    assert not revoking[0].is_alive()
    manifest = json.loads((tmp_path / keyring.MANIFEST).read_text())
    assert manifest["revoked"] == {old: {"role": "coordinator", "at": 3.0}} and manifest["roles"] == {
        new: "coordinator"}
    assert set(keyring.load_trusted(tmp_path).keys) == {new}


def test_a_folder_that_cannot_be_migrated_on_disk_is_named_once_not_at_every_read(tmp_path, monkeypatch,
                                                                                 caplog):
    from trainmedic.recovery import key_manifest

    key_id = keyring.generate_key(tmp_path, now=1.0)
    (tmp_path / keyring.MANIFEST).write_text(json.dumps({"signing": key_id, "created": {key_id: 1.0}}))

    def read_only(directory, manifest):
        raise PermissionError(13, "Permission denied", str(directory / keyring.MANIFEST))

    monkeypatch.setattr(key_manifest, "save", read_only)
    caplog.set_level(logging.WARNING)
    for _ in range(3):
        assert set(keyring.load_trusted(tmp_path).keys) == {key_id}
        assert keyring.load_signing(tmp_path).key_id == key_id
    assert len([r for r in caplog.records if "cannot write the migrated" in r.getMessage()]) == 1
    assert len([m for m in warnings_naming(caplog, key_id) if "migrated" in m]) == 1
