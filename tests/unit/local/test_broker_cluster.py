"""A cluster of local brokers without Java: a member's server.properties (node id, every controller,
three replicas with two in sync), the shared folder made once and read back from a copy, the member's
certificate signed by the cluster's CA, and the refusals of the flags that do not fit."""

from __future__ import annotations

import argparse
import datetime as dt
import json
import shutil
import stat
from pathlib import Path

import pytest

from trainmedic.common.errors import BrokerError, ConfigError
from trainmedic.local import broker_cli
from trainmedic.local.broker import LocalBroker
from trainmedic.local.broker_auth import complete
from trainmedic.local.broker_cli import add_arguments, listener_of, member_of
from trainmedic.local.broker_cluster import FILES, Member, make, parse_members, refusal, shutdown_wait_s
from trainmedic.local.broker_config import server_properties
from trainmedic.local.broker_listen import BrokerState, Listener
from trainmedic.local.broker_tls import problems

NOW = dt.datetime(2025, 6, 1, tzinfo=dt.UTC)
MEMBERS = "1@10.0.0.1:9092,2@10.0.0.2:9092,3@node3.example:9092"
LOOPBACK = "1@127.0.0.1:19700,2@127.0.0.1:19710,3@127.0.0.1:19720"


def props(text: str) -> dict[str, str]:
    return dict(line.split("=", 1) for line in text.splitlines() if "=" in line and not line.startswith(" "))


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def args(action: str, *argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    return parser.parse_args([action, *argv])


def member(tmp_path: Path, node_id: int = 2, members: str = MEMBERS) -> Member:
    folder = tmp_path / "made" / "broker" / "cluster"
    make(folder, parse_members(members), NOW)
    return Member.load(folder, node_id)


def test_a_members_properties_name_every_controller_and_keep_three_copies(tmp_path: Path) -> None:
    two = member(tmp_path)
    listener = two.listener(None, tls=False, plaintext=True)
    found = props(server_properties(tmp_path / "d", listener, passwords=complete({}), quorum=two.quorum))
    assert found["node.id"] == "2"
    assert found["controller.quorum.voters"] == "1@10.0.0.1:9093,2@10.0.0.2:9093,3@node3.example:9093"
    assert found["listeners"] == "SASL_PLAINTEXT://10.0.0.2:9092,CONTROLLER://10.0.0.2:9093"
    assert found["advertised.listeners"] == "SASL_PLAINTEXT://10.0.0.2:9092"
    assert {k: v for k, v in found.items() if "replica" in k or "min.isr" in k} == {
        "default.replication.factor": "3", "min.insync.replicas": "2",
        "offsets.topic.replication.factor": "3", "transaction.state.log.replication.factor": "3",
        "transaction.state.log.min.isr": "2"}
    single = props(server_properties(tmp_path / "d", Listener(port=19092), passwords=complete({})))
    assert (single["node.id"], single["controller.quorum.voters"]) == ("1", "1@127.0.0.1:19093")
    assert single["default.replication.factor"] == single["transaction.state.log.min.isr"] == "1"
    assert "min.insync.replicas" not in single  # a single broker as before: Kafka's default, one


def test_the_shared_folder_is_made_once_and_read_back_from_a_copy(tmp_path: Path) -> None:
    folder = tmp_path / "h1" / "broker" / "cluster"
    cluster, made = make(folder, parse_members(MEMBERS), NOW)
    assert made and sorted(p.name for p in folder.iterdir()) == sorted(FILES)
    assert (mode(folder.parent), mode(folder), mode(folder / "ca.key"), mode(folder / "secrets.json")) == (
        0o700, 0o700, 0o600, 0o600)
    assert make(folder, parse_members(MEMBERS), NOW) == (cluster, False)  # init again: the same cluster
    with pytest.raises(ConfigError, match="holds the cluster of .* already"):
        make(folder, parse_members(MEMBERS.replace("node3", "node4")), NOW)

    copy = tmp_path / "h3" / "broker" / "cluster"
    shutil.copytree(folder, copy)
    (copy / "ca.key").chmod(0o644)  # copied carelessly: the member makes it its owner's again
    three = Member.load(copy, 3)
    assert mode(copy / "ca.key") == 0o600 and three.cluster == cluster
    assert three.secrets() == json.loads((folder / "secrets.json").read_text()) == complete(three.secrets())
    assert cluster.bootstrap == "10.0.0.1:9092,10.0.0.2:9092,node3.example:9092"
    assert three.address == "node3.example:9092"

    secrets = json.loads((copy / "secrets.json").read_text())
    older = {k: v for k, v in secrets.items() if k != "telemetry"}  # a cluster made before telemetry keys
    (copy / "secrets.json").write_text(json.dumps(older))
    (folder / "secrets.json").write_text(json.dumps(older))
    one = Member.load(folder, 1)
    assert three.secrets()["telemetry"] == one.secrets()["telemetry"]  # every member the same, nothing copied
    assert three.secrets()["telemetry"] not in older.values()
    (copy / "secrets.json").write_text(json.dumps({**secrets, "controller": ""}))
    with pytest.raises(ConfigError, match="lacks controller"):  # never made anew on one member alone
        three.secrets()
    (copy / "cluster.json").write_text("{}")
    with pytest.raises(ConfigError, match="is not a cluster's"):
        Member.load(copy, 3)


def test_each_member_signs_its_own_certificate_with_the_clusters_ca(tmp_path: Path) -> None:
    three = member(tmp_path, 3)
    home = tmp_path / "h3"
    (home / "broker" / "tls").mkdir(parents=True)
    (home / "broker" / "tls" / "ca.pem").write_text("a single broker's CA, before")
    listener = three.listener("0.0.0.0:9092", tls=False, plaintext=False)  # off loopback: TLS
    assert listener.tls and listener.bootstrap == "node3.example:9092"
    assert listener.names == ("node3.example",)
    broker = LocalBroker(home, listener=listener, member=three)
    found = props(broker.write_config(three.secrets()).read_text())
    tls = home / "broker" / "tls"
    assert (tls / "ca.pem").read_bytes() == (three.folder / "ca.pem").read_bytes()
    assert mode(tls / "ca.key") == 0o600
    assert not problems((three.folder / "ca.pem").read_bytes(), (tls / "broker.pem").read_bytes(),
                        (tls / "broker.key").read_bytes(), ("node3.example",), dt.datetime.now(dt.UTC))
    assert found["node.id"] == "3" and found["listeners"].startswith("SASL_SSL://0.0.0.0:9092,")
    assert found["ssl.truststore.location"] == str(tls / "ca.pem")
    assert broker.bootstrap == three.cluster.bootstrap  # the role files name every member
    (three.folder / "ca.key").unlink()
    with pytest.raises(ConfigError, match="ca.key is missing"):
        broker.write_config(three.secrets())


def test_members_that_cannot_form_a_cluster_are_refused() -> None:
    assert parse_members(" 1@[fd00::1]:9092, 2@[fd00::2]:9092,3@[fd00::3]:9092 ") == {
        1: "[fd00::1]:9092", 2: "[fd00::2]:9092", 3: "[fd00::3]:9092"}
    for text, why in [
        ("1@h1:9092,2@h2:9092", "3 or more members"),
        ("h1:9092,2@h2:9092,3@h3:9092", "is not ID@HOST:PORT"),
        ("x@h1:9092,2@h2:9092,3@h3:9092", "is not ID@HOST:PORT"),
        ("1@h1,2@h2:9092,3@h3:9092", "is not HOST:PORT"),
        ("1@h1:9092,1@h2:9092,3@h3:9092", "node 1 twice"),
        ("1@h1:9092,2@h1:9092,3@h3:9092", "the same address"),
        ("1@0.0.0.0:9092,2@h2:9092,3@h3:9092", "not a wildcard"),
        ("1@h1:65535,2@h2:9092,3@h3:9092", "below 65535"),
        ("1@127.0.0.1:9092,2@h2:9092,3@h3:9092", "mixes loopback"),
    ]:
        with pytest.raises(ConfigError, match=why):
            parse_members(text)


def test_the_flags_of_a_member_that_do_not_fit_are_refused(tmp_path: Path) -> None:
    folder = tmp_path / "broker" / "cluster"
    with pytest.raises(ConfigError, match="no cluster in .* broker init --members"):
        member_of(args("start", "--node-id", "1"), folder)
    make(folder, parse_members(LOOPBACK), NOW)
    with pytest.raises(ConfigError, match=r"--node-id 4 is not a member .* \(nodes 1, 2, 3"):
        member_of(args("start", "--node-id", "4"), folder)
    with pytest.raises(ConfigError, match="give --node-id N"):  # a single broker's start finds a cluster
        member_of(args("start"), folder)
    with pytest.raises(ConfigError, match="--members is init's"):
        member_of(args("start", "--node-id", "1", "--members", LOOPBACK), folder)
    assert member_of(args("stop"), folder) is None  # stop and status are this home's, whichever member
    one = member_of(args("start", "--node-id", "1"), folder)
    assert one is not None
    for extra, why in [(("--port", "19700"), "not with --port"),
                       (("--advertise", "h:1"), "not with --advertise"),
                       (("--insecure",), "not with --insecure"),
                       (("--listen", "127.0.0.1:19800"), "port 19700")]:
        with pytest.raises(ConfigError, match=why):
            listener_of(args("start", "--node-id", "1", *extra), 9092, one)
    plain, _ = listener_of(args("start", "--node-id", "1"), 9092, one)
    assert (plain.listen, plain.controller, plain.tls) == ("127.0.0.1:19700", "127.0.0.1:19701", False)
    assert listener_of(args("start", "--node-id", "1", "--tls"), 9092, one)[0].tls


def test_init_says_what_to_copy_and_refuses_without_members(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("TRAINMEDIC_HOME", str(tmp_path))
    assert broker_cli.run(args("init")) == 2
    assert "init needs --members" in capsys.readouterr().err
    assert broker_cli.run(args("init", "--members", LOOPBACK)) == 0
    said = capsys.readouterr()
    assert said.out.strip() == str(tmp_path / "broker" / "cluster")
    assert "cluster.json, secrets.json, ca.pem, ca.key" in said.err and "--node-id N" in said.err
    assert broker_cli.run(args("start", "--node-id", "9")) == 2
    assert "--node-id 9 is not a member" in capsys.readouterr().err


def test_storage_of_another_cluster_or_node_is_refused(tmp_path: Path) -> None:
    two = member(tmp_path)
    data = tmp_path / "data"
    two.check_storage(data)  # not formatted yet: formatted for this cluster at start
    data.mkdir()
    meta = data / "meta.properties"
    meta.write_text(f"#\nnode.id=2\ndirectory.id=x\nversion=1\ncluster.id={two.cluster.cluster_id}\n")
    two.check_storage(data)
    meta.write_text("node.id=1\nversion=1\ncluster.id=SomeSingleBroker00000w\n")
    with pytest.raises(BrokerError, match="formatted for cluster SomeSingleBroker00000w as node 1"):
        two.check_storage(data)


def test_another_running_broker_is_refused_and_stop_waits_only_with_a_quorum(tmp_path: Path) -> None:
    two = member(tmp_path)
    single = BrokerState(pid=7, port=19092, controller_port=19093)
    assert refusal(single, None) is None
    assert refusal(BrokerState(7, 19710, 19711, node_id=2, members=3), two) is None
    assert "runs as a single broker already (pid 7)" in str(refusal(single, two))
    assert "start it as a single broker" in str(refusal(BrokerState(7, 1, 2, node_id=2, members=3), None))
    assert "node 1 of a 3-member cluster" in str(refusal(BrokerState(7, 1, 2, node_id=1, members=3), two))

    def answering(*up: int):  # the controllers that accept connections, by port
        return lambda _host, port: port in up

    assert shutdown_wait_s(two.folder, 2, 30.0, answering(9093)) == 30.0  # two of three: a quorum
    assert shutdown_wait_s(two.folder, 2, 30.0, answering()) == 3.0  # the last one: nobody would answer
    assert shutdown_wait_s(tmp_path / "nowhere", 2, 30.0, answering()) == 30.0
