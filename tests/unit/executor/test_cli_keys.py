"""`trainmedic executor`'s keys: found under TRAINMEDIC_HOME, a clear error when missing, and
--insecure with a keys folder refused (exit 2, saying which to drop); as root, a rank user or
--ranks-as-root."""

import argparse
import os

from trainmedic.cli import main
from trainmedic.recovery.executor.cli import EXECUTOR, OPTIONS, build_config
from trainmedic.recovery.executor.job_dirs import RANKS_AS_ROOT_WARNING


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



def test_as_root_without_a_rank_user_the_executor_refuses_unless_told_ranks_run_as_root(
        capsys, monkeypatch, tmp_path, caplog):
    """Issue 42, A6: the ranks of a root executor without run_as were root (every credential and key
    of the node, ptrace on the executor), with a warning only."""
    assert os.geteuid() == 0, "the check is a root executor's; this machine's tests run as root"
    monkeypatch.setenv("TRAINMEDIC_HOME", str(tmp_path))
    assert main(["executor", "--node", "n1", "--insecure", "--bootstrap", "127.0.0.1:1"]) == 2
    err = capsys.readouterr().err
    assert "neither job_uids nor run_as is set" in err and "--job-uids" in err and "--ranks-as-root" in err
    parser = argparse.ArgumentParser()
    OPTIONS.add_to(parser)
    args = parser.parse_args(["--node", "n1", "--insecure", "--ranks-as-root"])
    config = build_config(OPTIONS, EXECUTOR, args)
    assert config.ranks_as_root and config.rank_user is None
    assert RANKS_AS_ROOT_WARNING in caplog.text
