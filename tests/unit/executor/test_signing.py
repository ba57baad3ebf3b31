from pathlib import Path

import pytest

from bus.errors import ConfigError
from recovery.signing import canonical, load_key, sign, verify
from schemas import Command, CommandAction, WorkerSpec, decode
from schemas.topics import adapter

KEY = b"cluster-secret"


def command(**changes: object) -> Command:
    base = dict(ts=100.0, node="n1", id="c1", job="j", generation=2, action=CommandAction.RESTART,
                worker=WorkerSpec(ranks=(0, 1), world_size=2, master_addr="h", master_port=29500,
                                  command=("python", "train.py")))
    return Command(**{**base, **changes})


def test_a_signed_command_verifies_and_survives_the_wire():
    signed = sign(command(), KEY)
    assert verify(signed, KEY)
    wire = decode(signed.model_dump_json().encode(), adapter("commands"))
    assert verify(wire, KEY)


def test_every_field_is_covered_by_the_signature():
    signed = sign(command(), KEY)
    for change in ({"generation": 3}, {"node": "n2"}, {"ts": 101.0}, {"action": CommandAction.STOP},
                   {"worker": signed.worker.model_copy(update={"command": ("rm", "-rf", "/")})}):
        assert not verify(signed.model_copy(update=change), KEY), change


def test_extra_fields_are_signed_too():
    signed = sign(command(note="a"), KEY)
    assert verify(signed, KEY)
    assert not verify(signed.model_copy(update={"note": "b"}), KEY)


def test_wrong_key_missing_or_garbage_signature_fail():
    assert not verify(sign(command(), b"other"), KEY)
    assert not verify(command(), KEY)
    assert not verify(command(signature="zz"), KEY)


def test_canonical_form_is_sorted_compact_and_excludes_the_signature():
    text = canonical(command(signature="abc")).decode()
    assert '"signature"' not in text and ", " not in text and ": " not in text
    assert text.index('"action"') < text.index('"generation"') < text.index('"ts"')


def test_key_from_file_wins_over_variable(tmp_path: Path):
    path = tmp_path / "key"
    path.write_text("from-file\n")
    env = {"TRAINMEDIC_CLUSTER_KEY_FILE": str(path), "TRAINMEDIC_CLUSTER_KEY": "from-env"}
    assert load_key(env) == b"from-file"
    assert load_key({"TRAINMEDIC_CLUSTER_KEY": "from-env"}) == b"from-env"
    assert load_key({}) is None


def test_unreadable_or_empty_key_file_is_a_config_error(tmp_path: Path):
    with pytest.raises(ConfigError, match="cannot read"):
        load_key({"TRAINMEDIC_CLUSTER_KEY_FILE": str(tmp_path / "absent")})
    (tmp_path / "empty").write_text("  \n")
    with pytest.raises(ConfigError, match="empty"):
        load_key({"TRAINMEDIC_CLUSTER_KEY_FILE": str(tmp_path / "empty")})
