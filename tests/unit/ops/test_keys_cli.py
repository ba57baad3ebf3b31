"""`trainmedic keys` with roles, and the CLIs that sign as an operator: a missing operator key is
exit 2 saying what to run, before anything is published."""

from __future__ import annotations

import shutil

from trainmedic.cli import main
from trainmedic.recovery import keyring


def test_keys_are_generated_and_listed_by_role(tmp_path, capsys) -> None:
    keys = ["--keys-dir", str(tmp_path)]
    assert main(["keys", "generate", *keys]) == 0
    assert main(["keys", "generate", "--role", "operator", *keys]) == 0
    assert main(["keys", "generate", "--node", "n1", *keys]) == 0
    assert ".pub --node n1` there" in capsys.readouterr().out
    for _ in range(2):  # the new key made, trusted by hand elsewhere, then signing
        assert main(["keys", "rotate", "--node", "n1", "--no-announce", *keys]) == 0
    capsys.readouterr()
    assert main(["keys", "list", *keys]) == 0
    rows = [line.split() for line in capsys.readouterr().out.splitlines()[1:]]
    assert [(row[1], "yes" in row, "here" in row) for row in rows] == [
        ("coordinator", True, True), ("operator", True, True), ("node:n1", False, False),
        ("node:n1", True, True)]


def test_a_public_key_from_a_node_is_trusted_for_that_node(tmp_path, capsys) -> None:
    assert main(["keys", "generate", "--node", "n1", "--keys-dir", str(tmp_path / "n1")]) == 0
    pub = next((tmp_path / "n1").glob("*.pub"))
    assert main(["keys", "trust", str(pub), "--node", "n1", "--keys-dir", str(tmp_path / "c")]) == 0
    assert f"key {pub.stem} trusted here as node:n1" in capsys.readouterr().out
    assert main(["keys", "trust", str(pub), "--role", "operator", "--keys-dir", str(tmp_path / "c")]) == 2
    assert "one key, one role" in capsys.readouterr().err


def test_revoke_wants_force_for_a_signing_key_and_list_shows_revoked_and_role_less_keys(tmp_path, capsys):
    keys = ["--keys-dir", str(tmp_path / "n1")]
    assert main(["keys", "generate", "--node", "n1", *keys]) == 0
    for _ in range(2):  # the new key made, trusted by hand elsewhere, then signing
        assert main(["keys", "rotate", "--node", "n1", "--no-announce", *keys]) == 0
    old, new = (key.key_id for key in keyring.list_keys(tmp_path / "n1"))
    assert main(["keys", "generate", "--keys-dir", str(tmp_path / "other")]) == 0
    stray = next((tmp_path / "other").glob("*.pub"))
    shutil.copy(stray, tmp_path / "n1")  # by hand: no role
    capsys.readouterr()
    assert main(["keys", "revoke", new, *keys]) == 2
    err = capsys.readouterr().err
    assert "node:n1 signing key" in err and "keys rotate --node n1" in err and "--force" in err
    assert main(["keys", "revoke", old, *keys]) == 0
    assert f"key {old} (node:n1) revoked" in capsys.readouterr().out
    assert main(["keys", "list", *keys]) == 0
    out, err = capsys.readouterr()
    rows = {row[0]: row for row in (line.split() for line in out.splitlines()[1:])}
    assert rows[old][1:3] == ["node:n1", "REVOKED"] and "(revoked" in rows[old]
    assert rows[new][1:3] == ["node:n1", "trusted"] and rows[stray.stem][1:3] == ["-", "NO-ROLE"]
    assert "keys trust ID.pub --role coordinator" in err


def test_job_submit_without_an_operator_key_is_exit_2_saying_what_to_run(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("TRAINMEDIC_HOME", str(tmp_path))
    spec = tmp_path / "job.yaml"
    spec.write_text("id: a\nnodes: [n1]\nthroughput: {1: 1.0e15}\ncommand: [python, train.py]\n")
    assert main(["job", "submit", str(spec), "--bootstrap", "127.0.0.1:1"]) == 2
    err = capsys.readouterr().err
    assert "no operator key in" in err and "trainmedic keys generate --role operator" in err


def test_a_node_change_without_an_operator_key_is_exit_2(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("TRAINMEDIC_HOME", str(tmp_path))
    for action in ("cordon", "drain", "uncordon"):
        assert main(["nodes", action, "n1", "--bootstrap", "127.0.0.1:1"]) == 2
        assert "trainmedic keys generate --role operator" in capsys.readouterr().err
    assert main(["nodes", "cordon", "n1", "--insecure", "--keys-dir", str(tmp_path), "--bootstrap",
                 "127.0.0.1:1"]) == 2
    assert "exclude each other" in capsys.readouterr().err
