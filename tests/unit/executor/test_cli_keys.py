"""`trainmedic executor`'s keys: found under TRAINMEDIC_HOME, a clear error when missing, and
--insecure with a keys folder refused (exit 2, saying which to drop)."""

from trainmedic.cli import main


def test_without_keys_the_executor_says_where_it_looked_and_what_to_do(capsys, monkeypatch, tmp_path):
    monkeypatch.setenv("TRAINMEDIC_HOME", str(tmp_path))
    assert main(["executor", "--node", "n1", "--bootstrap", "127.0.0.1:1"]) == 2
    err = capsys.readouterr().err
    assert f"no trusted command keys (*.pub) in {tmp_path / 'keys'}" in err
    assert "trainmedic keys generate" in err and "--insecure" in err


def test_insecure_with_a_keys_folder_is_exit_2_saying_which_to_drop(capsys, monkeypatch, tmp_path):
    from trainmedic.recovery import keyring

    keyring.generate_key(tmp_path / "keys", now=1.0)
    for argv, env in ((["--keys-dir", str(tmp_path / "keys")], {}),
                      ([], {"TRAINMEDIC_EXECUTOR_KEYS_DIR": str(tmp_path / "keys")})):
        for name, value in env.items():
            monkeypatch.setenv(name, value)
        assert main(["executor", "--node", "n1", "--insecure", *argv, "--bootstrap", "127.0.0.1:1"]) == 2
        err = capsys.readouterr().err
        assert "--insecure and a keys folder" in err and "drop --insecure" in err and "drop --keys-dir" in err


def test_an_old_cluster_key_variable_stops_the_executor(capsys, monkeypatch):
    monkeypatch.setenv("TRAINMEDIC_CLUSTER_KEY_FILE", "/etc/trainmedic/cluster.key")
    assert main(["executor", "--node", "n1", "--insecure", "--bootstrap", "127.0.0.1:1"]) == 2
    assert "TRAINMEDIC_CLUSTER_KEY_FILE is set" in capsys.readouterr().err


def test_without_its_own_node_key_the_executor_says_what_to_run(capsys, monkeypatch, tmp_path):
    from trainmedic.recovery import keyring

    keyring.generate_key(tmp_path / "keys", now=1.0)
    keyring.generate_key(tmp_path / "keys", now=1.0, role=keyring.node_role("n2"))  # another node's
    monkeypatch.setenv("TRAINMEDIC_HOME", str(tmp_path))
    assert main(["executor", "--node", "n1", "--bootstrap", "127.0.0.1:1"]) == 2
    err = capsys.readouterr().err
    assert "no key of node:n1" in err and "trainmedic keys generate --node n1" in err and "--insecure" in err
