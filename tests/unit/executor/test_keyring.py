"""The keys folder: generate, rotate, list, load; and the errors that say what to do."""

import stat

import pytest

from trainmedic.common.errors import ConfigError
from trainmedic.recovery import key_manifest, keyring
from trainmedic.recovery.key_folders import KeyFolder, SigningFolder
from trainmedic.schemas import Command, CommandAction, encode


def command() -> Command:
    return Command(ts=1.0, node="n1", id="c1", job="j", generation=0, action=CommandAction.STOP)


def test_generate_writes_a_private_key_only_its_owner_reads_and_signs_with_it(tmp_path):
    key_id = keyring.generate_key(tmp_path, now=10.0)
    assert stat.S_IMODE((tmp_path / f"{key_id}.key").stat().st_mode) == 0o600
    signer = keyring.load_signing(tmp_path)
    assert signer.key_id == key_id
    assert keyring.load_trusted(tmp_path).check(encode(signer.sign(command()))) is None
    with pytest.raises(ConfigError, match="keys rotate"):
        keyring.generate_key(tmp_path, now=11.0)


def test_rotate_signs_with_the_new_key_and_keeps_trusting_the_old_one(tmp_path):
    old = keyring.generate_key(tmp_path, now=10.0)
    signed_before = encode(keyring.load_signing(tmp_path).sign(command()))
    assert keyring.rotate_key(tmp_path, now=20.0) == (old, new := keyring.load_signing(tmp_path).key_id)
    assert new != old and not (tmp_path / f"{old}.key").exists()
    trusted = keyring.load_trusted(tmp_path)
    assert trusted.check(signed_before) is None
    assert [(k.key_id, k.kind, k.created, k.signing, k.private) for k in keyring.list_keys(tmp_path)] == [
        (old, "ed25519", 10.0, False, False), (new, "ed25519", 20.0, True, True)]


def test_missing_keys_say_what_to_do(tmp_path):
    with pytest.raises(ConfigError, match="trainmedic keys generate"):
        keyring.load_signing(tmp_path)
    with pytest.raises(ConfigError, match=r"keys trust ID.pub --role coordinator"):
        keyring.load_trusted(tmp_path)
    with pytest.raises(ConfigError, match="no coordinator signing key to rotate"):
        keyring.rotate_key(tmp_path, now=1.0)


def test_a_public_key_under_another_id_is_refused(tmp_path):
    key_id = keyring.generate_key(tmp_path / "a", now=1.0)
    key_manifest.save(tmp_path / "b", {"roles": {"0123456789abcdef": "coordinator"}})
    (tmp_path / "b" / "0123456789abcdef.pub").write_bytes((tmp_path / "a" / f"{key_id}.pub").read_bytes())
    with pytest.raises(ConfigError, match="not the Ed25519 public key of id 0123456789abcdef"):
        keyring.load_trusted(tmp_path / "b")


def test_ensure_generates_only_once(tmp_path):
    first = keyring.ensure_key(tmp_path, now=1.0)
    assert first and keyring.ensure_key(tmp_path, now=2.0) is None
    assert keyring.load_signing(tmp_path).key_id == first


def test_an_old_hmac_cluster_key_variable_is_a_configuration_error():
    with pytest.raises(ConfigError, match="unset it"):
        keyring.refuse_legacy({"TRAINMEDIC_CLUSTER_KEY": "k"})
    keyring.refuse_legacy({})


def test_a_key_folder_picks_up_a_rotated_key_and_forgets_a_removed_one(tmp_path):
    old = keyring.generate_key(tmp_path, now=1.0)
    folder = KeyFolder(tmp_path, keyring.load_trusted(tmp_path))
    assert set(folder.trusted().keys) == {old}
    _, new = keyring.rotate_key(tmp_path, now=2.0)
    signed_by_new = encode(keyring.load_signing(tmp_path).sign(command()))
    assert folder.trusted().check(signed_by_new) is None and set(folder.trusted().keys) == {old, new}
    (tmp_path / f"{old}.pub").unlink()
    assert set(folder.trusted().keys) == {new}
    (tmp_path / f"{new}.pub").unlink()  # the last one removed too: none trusted (an ERROR says so)
    assert set(folder.trusted().keys) == set()
    assert folder.trusted().check(signed_by_new).startswith(f"unknown key id '{new}'")


def test_a_half_copied_key_is_read_again_once_complete(tmp_path):
    keyring.generate_key(tmp_path / "coordinator", now=1.0)
    _, new = keyring.rotate_key(tmp_path / "coordinator", now=2.0)
    node = tmp_path / "node"
    for pub in (tmp_path / "coordinator").glob("*.pub"):
        if pub.stem != new:
            keyring.trust_key(node, pub, keyring.COORDINATOR, now=3.0)
    folder = KeyFolder(node, keyring.load_trusted(node))
    folder.trusted()
    text = (tmp_path / "coordinator" / f"{new}.pub").read_bytes()
    manifest = key_manifest.read(node)  # as `keys trust` does: the role recorded, then the file copied
    manifest["roles"][new] = keyring.COORDINATOR
    key_manifest.save(node, manifest)
    (node / f"{new}.pub").write_bytes(text[:20])
    assert new not in folder.trusted().keys
    (node / f"{new}.pub").write_bytes(text)
    assert new in folder.trusted().keys


def test_each_role_has_its_own_signing_key_and_an_executor_trusts_only_the_coordinators(tmp_path):
    coordinator = keyring.generate_key(tmp_path, now=1.0)
    operator = keyring.generate_key(tmp_path, now=2.0, role=keyring.OPERATOR)
    n1 = keyring.generate_key(tmp_path, now=3.0, role=keyring.node_role("n1"))
    assert keyring.load_signing(tmp_path, keyring.OPERATOR).key_id == operator
    assert keyring.load_signing(tmp_path, "node:n1").key_id == n1
    assert keyring.load_signing(tmp_path).key_id == coordinator
    assert set(keyring.load_trusted(tmp_path).keys) == {coordinator}  # never an operator's or a node's
    assert {role: set(keys.keys) for role, keys in keyring.load_roles(tmp_path).items()} == {
        "coordinator": {coordinator}, "operator": {operator}, "node:n1": {n1}}
    assert [(k.key_id, k.role, k.signing) for k in keyring.list_keys(tmp_path)] == [
        (coordinator, "coordinator", True), (operator, "operator", True), (n1, "node:n1", True)]
    with pytest.raises(ConfigError, match=r"keys rotate --node n1"):
        keyring.generate_key(tmp_path, now=4.0, role="node:n1")


def test_rotating_one_role_keeps_the_others_and_the_old_key_of_the_role_trusted(tmp_path):
    coordinator = keyring.generate_key(tmp_path, now=1.0)
    old = keyring.generate_key(tmp_path, now=2.0, role=keyring.OPERATOR)
    assert keyring.rotate_key(tmp_path, now=3.0, role=keyring.OPERATOR)[0] == old
    new = keyring.load_signing(tmp_path, keyring.OPERATOR).key_id
    assert set(keyring.load_roles(tmp_path)["operator"].keys) == {old, new}
    assert keyring.load_signing(tmp_path).key_id == coordinator


def test_missing_role_keys_say_what_to_run(tmp_path):
    keyring.generate_key(tmp_path, now=1.0)
    with pytest.raises(ConfigError, match=r"no operator key in .*`trainmedic keys generate --role operator`"):
        keyring.load_signing(tmp_path, keyring.OPERATOR)
    with pytest.raises(ConfigError, match=r"no key of node:n7 .*`trainmedic keys generate --node n7`"):
        keyring.load_signing(tmp_path, keyring.node_role("n7"))


def test_a_folder_written_before_roles_holds_coordinator_keys(tmp_path):
    import json

    key_id = keyring.generate_key(tmp_path, now=1.0)
    (tmp_path / "keys.json").write_text(json.dumps({"signing": key_id, "created": {key_id: 1.0}}))
    assert keyring.load_signing(tmp_path).key_id == key_id
    assert [(k.key_id, k.role) for k in keyring.list_keys(tmp_path)] == [(key_id, "coordinator")]


def test_a_public_key_made_elsewhere_is_trusted_for_its_role_only(tmp_path):
    n1 = keyring.generate_key(tmp_path / "node", now=1.0, role=keyring.node_role("n1"))
    coordinator = tmp_path / "coordinator"
    keyring.generate_key(coordinator, now=1.0)
    assert keyring.trust_key(coordinator, tmp_path / "node" / f"{n1}.pub", "node:n1", now=2.0) == n1
    assert set(keyring.load_roles(coordinator)["node:n1"].keys) == {n1}
    assert n1 not in keyring.load_trusted(coordinator).keys and not (coordinator / f"{n1}.key").exists()
    with pytest.raises(ConfigError, match="already trusted here as node:n1"):
        keyring.trust_key(coordinator, tmp_path / "node" / f"{n1}.pub", keyring.OPERATOR, now=3.0)


def test_a_key_folder_with_another_loader_sees_a_trusted_key_added(tmp_path):
    keyring.generate_key(tmp_path, now=1.0)
    folder = KeyFolder(tmp_path, keyring.load_roles(tmp_path), keyring.load_roles)
    assert "operator" not in folder.trusted()
    operator = keyring.generate_key(tmp_path, now=2.0, role=keyring.OPERATOR)
    assert set(folder.trusted()["operator"].keys) == {operator}


def test_a_key_folder_sees_a_change_made_before_its_first_look(tmp_path):
    old = keyring.generate_key(tmp_path, now=1.0)
    folder = KeyFolder(tmp_path, keyring.load_trusted(tmp_path))  # as an executor starts
    _, new = keyring.rotate_key(tmp_path, now=2.0)  # before its first command
    assert set(folder.trusted().keys) == {old, new}


def test_a_node_key_is_made_first_and_signs_only_once_rotated_to(tmp_path):
    role = keyring.node_role("n1")
    first = keyring.generate_key(tmp_path, now=10.0, role=role)
    waiting = keyring.next_key(tmp_path, 20.0, role)
    assert keyring.next_key(tmp_path, 21.0, role).key_id == waiting.key_id  # a try that failed: the same
    assert keyring.load_signing(tmp_path, role).key_id == first
    with pytest.raises(ConfigError, match="another rotation ran meanwhile"):
        keyring.rotate_key(tmp_path, 22.0, role, expected=waiting.key_id)
    assert keyring.rotate_key(tmp_path, 22.0, role, expected=first) == (first, waiting.key_id)
    assert keyring.load_signing(tmp_path, role).key_id == waiting.key_id
    assert not (tmp_path / f"{first}.key").exists()
    assert keyring.next_key(tmp_path, 30.0, role).key_id != waiting.key_id  # the next rotation's own


def test_a_key_made_for_a_rotation_and_revoked_never_signs(tmp_path):
    role = keyring.node_role("n1")
    first = keyring.generate_key(tmp_path, now=10.0, role=role)
    waiting = keyring.next_key(tmp_path, 20.0, role).key_id
    keyring.revoke_key(tmp_path, waiting, 21.0)
    assert keyring.rotate_key(tmp_path, 22.0, role, expected=first)[1] != waiting


def test_a_signing_folder_signs_with_the_key_rotated_to_from_its_next_signature(tmp_path):
    role = keyring.node_role("n1")
    first = keyring.generate_key(tmp_path, now=10.0, role=role)
    folder = SigningFolder(tmp_path, role, keyring.load_signing(tmp_path, role))
    assert folder.current().key_id == first
    second = keyring.rotate_key(tmp_path, now=20.0, role=role)[1]
    assert folder.current().key_id == second  # no restart: the executor's next report
    third = keyring.next_key(tmp_path, 30.0, role).key_id
    good = (tmp_path / f"{third}.key").read_bytes()
    (tmp_path / f"{third}.key").write_text("half written")
    keyring.rotate_key(tmp_path, 31.0, role, expected=second)
    assert folder.current().key_id == second  # a key that does not load: the one it had...
    (tmp_path / f"{third}.key").write_bytes(good)
    assert folder.current().key_id == third  # ...and tried again at the next signature
    assert SigningFolder(None, role, folder.current()).current().key_id == third  # no folder: the key given
