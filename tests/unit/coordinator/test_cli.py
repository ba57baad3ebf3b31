"""`trainmedic job submit` and `trainmedic coordinator`: bad input is one line on stderr and exit 2."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from trainmedic.cli import main
from trainmedic.ops.jobs.cli import load_spec

GOOD = "id: llm\nnodes: [n1, n2]\nthroughput: {1: 1.0e14, 2: 1.9e14}\ncommand: [python, train.py]\n"


@pytest.mark.parametrize(("text", "message"), [
    (GOOD + "ranks_per_nodes: 8\n", "unknown field 'ranks_per_nodes'"),
    (GOOD.replace("[n1, n2]", "[n1, n2, n3]"), "nodes names 3 nodes, but throughput lists only sizes 1, 2"),
    (GOOD.replace("nodes: [n1, n2]\n", ""), "nodes: name the nodes the job starts on"),
    (GOOD.replace("command: [python, train.py]\n", ""), "command: Field required"),
    (GOOD.replace("1: 1.0e14", "0: 1.0e14"), "throughput: throughput size 0 must be a positive node count"),
    (GOOD + "master_port: 70000\n", "master_port: Input should be less than or equal to 65535"),
    ("id: [unclosed\n", "not YAML"),
    ("- just a list\n", "expected a mapping"),
])
def test_a_bad_spec_is_one_line_and_exit_2(tmp_path, capsys, text: str, message: str) -> None:
    spec = tmp_path / "job.yaml"
    spec.write_text(text)
    assert main(["job", "submit", str(spec), "--bootstrap", "127.0.0.1:1"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("trainmedic job: ") and message in err and err.count("\n") == 1


@pytest.mark.parametrize(("text", "cluster", "message"), [
    (GOOD + "weight: 1.0e6\n", None, "the coordinator would reject job llm: weight 1e+06 is above 1000"),
    (GOOD.replace("1: 1.0e14", "1: 1.0e18"), None,
     "reject job llm: throughput 1e+18 FLOP/s at 1 nodes is above 1e+17 per node"),
    (GOOD + "ranks_per_node: 1000\n", None, "reject job llm: ranks_per_node 1000 is above 256"),
    (GOOD, "nodes: [{id: n1}, {id: n3}]\n", "reject job llm: node n2 not in the cluster"),
    (GOOD, "nodes: []\n", "reject job llm: nodes n1, n2 not in the cluster"),
    (GOOD, "nodes: [{id: n1, gpus: 0}]\n", "--config: "),
    (GOOD.replace("id: llm", "id: ../../etc"), None, "reject job ../../etc: job id '../../etc' cannot name"),
])
def test_a_spec_the_coordinator_would_reject_is_refused_up_front(tmp_path, capsys, text, cluster,
                                                                  message) -> None:
    spec = tmp_path / "job.yaml"
    spec.write_text(text)
    argv = ["job", "submit", str(spec), "--bootstrap", "127.0.0.1:1"]
    if cluster is not None:
        (tmp_path / "coordinator.yaml").write_text(cluster)
        argv += ["--config", str(tmp_path / "coordinator.yaml")]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("trainmedic job: ") and message in err and err.count("\n") == 1, err


def test_a_missing_spec_file_is_exit_2(tmp_path, capsys) -> None:
    assert main(["job", "submit", str(tmp_path / "nope.yaml")]) == 2
    assert "cannot read" in capsys.readouterr().err


def test_the_example_spec_is_valid() -> None:
    spec = load_spec(Path(__file__).parents[3] / "docs" / "job-example.yaml")
    assert spec.id == "demo-llm" and len(spec.nodes) in spec.throughput


def test_the_coordinator_refuses_to_send_unsigned_commands_without_insecure(capsys, monkeypatch,
                                                                           tmp_path) -> None:
    monkeypatch.setenv("TRAINMEDIC_HOME", str(tmp_path))
    assert main(["coordinator", "--bootstrap", "127.0.0.1:1"]) == 2
    err = capsys.readouterr().err
    assert f"no command signing key in {tmp_path / 'keys'}" in err
    assert "trainmedic keys generate" in err and "--insecure" in err


def test_insecure_with_a_keys_folder_is_a_configuration_error_saying_which_to_drop(capsys, tmp_path) -> None:
    assert main(["coordinator", "--insecure", "--keys-dir", str(tmp_path), "--bootstrap", "127.0.0.1:1"]) == 2
    err = capsys.readouterr().err
    assert "--insecure and a keys folder" in err and "drop --insecure" in err and "drop --keys-dir" in err


def test_an_old_cluster_key_variable_is_a_configuration_error(capsys, monkeypatch) -> None:
    monkeypatch.setenv("TRAINMEDIC_CLUSTER_KEY", "s3cret")
    assert main(["coordinator", "--insecure", "--bootstrap", "127.0.0.1:1"]) == 2
    assert "TRAINMEDIC_CLUSTER_KEY is set" in capsys.readouterr().err


def test_the_coordinator_signs_with_the_signing_key_of_its_keys_folder(tmp_path, monkeypatch) -> None:
    import argparse

    from trainmedic.recovery import keyring
    from trainmedic.recovery.coordinator.cli import add_arguments, build_config, load_keys
    from trainmedic.schemas import Command, encode

    key_id = keyring.generate_key(tmp_path / "keys", now=1.0)
    keyring.generate_key(tmp_path / "keys", now=1.0, role=keyring.OPERATOR)
    monkeypatch.setenv("TRAINMEDIC_HOME", str(tmp_path))
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    signing, trust = load_keys(build_config(parser.parse_args([])))
    trusted = trust().own
    command = signing.sign(Command(ts=1.0, node="n1", id="c1", job="j", generation=2, action="restart"))
    assert command.key_id == key_id and trusted.check(encode(command)) is None
    tampered = encode(command).replace(b'"generation":2', b'"generation":3')  # the fencing token is signed
    assert "bad signature" in trusted.check(tampered)


def test_the_coordinator_refuses_to_start_with_no_operator_key_saying_what_to_run(capsys, monkeypatch,
                                                                                  tmp_path) -> None:
    from trainmedic.recovery import keyring

    keyring.generate_key(tmp_path / "keys", now=1.0)
    monkeypatch.setenv("TRAINMEDIC_HOME", str(tmp_path))
    assert main(["coordinator", "--bootstrap", "127.0.0.1:1"]) == 2
    err = capsys.readouterr().err
    assert "no operator key" in err and "trainmedic keys generate --role operator" in err


def test_a_bad_coordinator_config_is_exit_2(tmp_path, capsys) -> None:
    config = tmp_path / "c.yaml"
    config.write_text("ack_timeout_s: 900\ndone_timeout_s: 60\n")
    assert main(["coordinator", "--config", str(config), "--insecure"]) == 2
    assert "ack_timeout_s (900.0) must not exceed done_timeout_s (60.0)" in capsys.readouterr().err


def test_python_dash_m_recovery_is_the_coordinator() -> None:
    out = subprocess.run([sys.executable, "-m", "trainmedic.recovery", "--help"], capture_output=True,
                         text=True,
                         check=True)
    assert "usage: python -m trainmedic.recovery" in out.stdout and "--insecure" in out.stdout


def coordinator_config(argv: list[str], env: dict[str, str] | None = None):
    import argparse

    from trainmedic.recovery.coordinator.cli import COORDINATOR, OPTIONS, add_arguments

    parser = argparse.ArgumentParser()
    add_arguments(parser)
    return OPTIONS.build(COORDINATOR, parser.parse_args(argv), env=env or {})


def test_the_coordinator_options_are_flags_variables_and_yaml_keys(tmp_path) -> None:
    from trainmedic.recovery.coordinator.core.config import CoordinatorConfig, NodeConfig

    config = tmp_path / "c.yaml"
    config.write_text("ack_timeout_s: 20\nmax_retries: 5\ntick_s: 2\n"
                      "nodes:\n  - {id: n01, switch: leaf-1, address: 10.0.0.1, gpus: 4}\n")
    env = {"TRAINMEDIC_COORDINATOR_ACK_TIMEOUT_S": "10", "TRAINMEDIC_COORDINATOR_MAX_RETRIES": "3",
           "TRAINMEDIC_COORDINATOR_INSECURE": "yes"}
    argv = ["--config", str(config), "--ack-timeout-s", "5", "--default-address", "127.0.0.1"]
    assert coordinator_config(argv, env) == CoordinatorConfig(
        ack_timeout_s=5, max_retries=3, tick_s=2, default_address="127.0.0.1", insecure=True,
        nodes=(NodeConfig(id="n01", switch="leaf-1", address="10.0.0.1", gpus=4),))
    assert coordinator_config([]) == CoordinatorConfig()
    assert coordinator_config(["--insecure"]).insecure
    limits = coordinator_config(["--restart-backoff-s", "10", "--restart-backoff-s", "60",
                                 "--group-window-s", "5"],
                                {"TRAINMEDIC_COORDINATOR_ISOLATION_CAP": "0.25",
                                 "TRAINMEDIC_COORDINATOR_MAX_RESTARTS": "2"})
    assert (limits.restart_backoff_s, limits.group_window_s, limits.isolation_cap, limits.max_restarts) == (
        (10.0, 60.0), 5.0, 0.25, 2)


def test_the_node_list_is_yaml_only(tmp_path, capsys) -> None:
    with pytest.raises(SystemExit):
        coordinator_config(["--nodes", "n01"])
    config = tmp_path / "c.yaml"
    config.write_text("nodes:\n  - {id: n01, gpus: 0}\n")
    assert main(["coordinator", "--config", str(config), "--insecure"]) == 2
    assert f"{config}: nodes.0.gpus: Input should be greater than or equal to 1" in capsys.readouterr().err


def test_a_bad_coordinator_variable_is_one_line_naming_it(capsys, monkeypatch) -> None:
    monkeypatch.setenv("TRAINMEDIC_COORDINATOR_TICK_S", "often")
    assert main(["coordinator", "--insecure", "--bootstrap", "127.0.0.1:1"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("trainmedic coordinator: TRAINMEDIC_COORDINATOR_TICK_S: Input should be a valid")
    assert err.count("\n") == 1


def test_the_job_cli_client_id_is_under_the_prefix(monkeypatch) -> None:
    from trainmedic.ops.jobs import cli as job_cli

    seen = {}

    class Producer:
        def __init__(self, settings, client_id):
            seen["client_id"] = client_id

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

        def send(self, *args, **kwargs):
            pass

    monkeypatch.setattr("trainmedic.ops.jobs.cli.EventProducer", Producer)
    from trainmedic.bus.settings import KafkaSettings

    spec = job_cli.load_spec(Path(__file__).parents[3] / "docs" / "job-example.yaml")
    job_cli.submit(KafkaSettings(topic_prefix="acme."), spec)
    assert seen["client_id"] == "acme.job"


def test_a_submitted_job_is_signed_for_the_prefix_it_is_published_under(monkeypatch) -> None:
    from trainmedic.bus.settings import KafkaSettings
    from trainmedic.ops.jobs import cli as job_cli
    from trainmedic.recovery.signing import TrustedKeys, generate
    from trainmedic.schemas import encode

    sent = []

    class Producer:
        def __init__(self, settings, client_id):
            pass

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

        def send(self, topic, event, key):
            sent.append(event)

    monkeypatch.setattr("trainmedic.ops.jobs.cli.EventProducer", Producer)
    operator = generate()
    spec = job_cli.load_spec(Path(__file__).parents[3] / "docs" / "job-example.yaml")
    job_cli.submit(KafkaSettings(topic_prefix="acme."), spec, operator)
    trusted = TrustedKeys.of(operator.private.public_key())
    assert trusted.check(encode(sent[0]), "job submission", "acme.") is None
    assert trusted.check(encode(sent[0]), "job submission", "trainmedic.").startswith("other deployment")
