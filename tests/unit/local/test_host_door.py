"""The registrar's door for control-plane hosts (`POST /host`): an invited host gets exactly its roles'
files and the key directory, its key trusted for its role; whatever would fail is found before the token
is spent (a role file missing, a key revoked here or trusted here for another role), and a token is
redeemed once even by two registrar processes."""

from __future__ import annotations

import base64
import threading
from pathlib import Path

import pytest

from tests.unit.local.test_invites import COORDINATOR, NOW, invited, join
from trainmedic.common.errors import ConfigError
from trainmedic.local.host_door import HostDoor
from trainmedic.local.invites import INVITES_FILE, Invites
from trainmedic.local.registrar_http import answered
from trainmedic.recovery import keyring
from trainmedic.schemas import encode

FILES = {"ca.pem": b"the CA", "coordinator.json": b"{}", "detector.json": b"{}", "telemetry-master.key": b"k",
         "operator.json": b"{}", "admin.json": b"the admin's"}


@pytest.fixture
def door(tmp_path: Path) -> HostDoor:
    (credentials := tmp_path / "credentials").mkdir()
    for name, data in FILES.items():
        (credentials / name).write_bytes(data)
    return HostDoor(tmp_path, credentials, tmp_path / "keys", "trainmedic.", threading.Lock(),
                    lambda: NOW + 5)


def used(door: HostDoor, token) -> bool:
    return Invites(door.invites.path).load()[token.key_id].used is not None


def test_an_invited_host_gets_its_roles_files_and_its_key_trusted_for_its_role(door: HostDoor) -> None:
    token = invited(door.invites.path.parent)
    status, answer = door.join(encode(join(token)), "10.0.0.2")
    assert status == 200 and used(door, token)
    files = {name: base64.b64decode(data) for name, data in answer["files"].items()}
    assert files == {name: FILES[name] for name in ("ca.pem", "coordinator.json", "detector.json",
                                                    "telemetry-master.key")}  # no admin.json, no operator's
    key_id = COORDINATOR[1].key_id
    assert keyring.load_roles(door.keys_dir)["coordinator"].keys.keys() == {key_id}
    assert [(k["role"], k["key"]["key_id"]) for k in answer["keys"]] == [("coordinator", key_id)]
    assert door.join(encode(join(token)), "10.0.0.2")[0] == 409


def test_a_missing_role_file_fails_before_the_token_is_spent(door: HostDoor) -> None:
    token = invited(door.invites.path.parent)
    (door.credentials / "detector.json").unlink()
    status, answer = answered("POST /host", door.join, encode(join(token)), "10.0.0.2")
    assert status == 500 and "error" in answer
    assert not used(door, token) and "coordinator" not in keyring.load_roles(door.keys_dir)


def test_a_key_revoked_here_or_trusted_for_another_role_is_refused_before_the_token_is_spent(
        door: HostDoor) -> None:
    token = invited(door.invites.path.parent)
    key = COORDINATOR[1]
    keyring.trust_public(door.keys_dir, key.private.public_key(), keyring.OPERATOR, NOW)
    assert door.join(encode(join(token)), "10.0.0.2")[0] == 409 and not used(door, token)
    keyring.revoke_key(door.keys_dir, key.key_id, NOW)
    status, answer = door.join(encode(join(token)), "10.0.0.2")
    assert status == 403 and "revoked" in answer["error"] and not used(door, token)


def test_a_token_is_redeemed_once_even_by_two_registrar_processes(tmp_path: Path) -> None:
    token = invited(tmp_path)
    first, second = Invites(tmp_path / INVITES_FILE), Invites(tmp_path / INVITES_FILE)
    first.use(token.key_id, NOW + 1)
    with pytest.raises(ConfigError, match="used already"):
        second.use(token.key_id, NOW + 2)
