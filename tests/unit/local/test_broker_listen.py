"""Where the local broker listens and what it advertises (`--listen`, `--advertise`), when it is TLS,
the refusal of a plain listener off loopback, and the server.properties each gives, without Java."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from trainmedic.common.errors import ConfigError
from trainmedic.local.broker_auth import complete
from trainmedic.local.broker_cli import add_arguments, listener_of
from trainmedic.local.broker_config import server_properties
from trainmedic.local.broker_listen import BrokerState, Listener, listener_from
from trainmedic.local.broker_tls import Stores


def props(text: str) -> dict[str, str]:
    return dict(line.split("=", 1) for line in text.splitlines() if "=" in line and not line.startswith(" "))


def args(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    return parser.parse_args(["start", *argv])


def test_without_listen_the_broker_is_loopbacks_and_plain_as_before() -> None:
    listener, operator = listener_of(args(), 19092)
    assert listener == Listener(port=19092) and operator is None
    assert (listener.listen, listener.controller, listener.bootstrap) == (
        "127.0.0.1:19092", "127.0.0.1:19093", "127.0.0.1:19092")
    assert not listener.tls and listener.loopback


def test_off_loopback_every_listener_is_tls_and_a_plain_one_must_be_asked_for_by_name() -> None:
    assert listener_from(9092, "10.0.0.5:9092").tls
    assert listener_from(9092, "127.0.0.1:19500", tls=True).tls
    assert not listener_from(9092, "127.0.0.1:19500").tls  # loopback: as before
    with pytest.raises(ConfigError, match=r"plain \(non-TLS\) listener on 10.0.0.5:9092 .* --plaintext"):
        Listener(host="10.0.0.5")
    with pytest.raises(ConfigError, match="--plaintext"):  # no authentication means no TLS either
        listener_from(9092, "10.0.0.5:9092", insecure=True)
    asked = listener_from(9092, "10.0.0.5:9092", plaintext=True, insecure=True)
    assert not asked.tls and asked.plaintext and not asked.loopback
    with pytest.raises(ConfigError, match="not with --tls"):
        listener_from(9092, "127.0.0.1:19500", tls=True, insecure=True)
    with pytest.raises(ConfigError, match="exclude each other"):
        listener_from(9092, "10.0.0.5:9092", tls=True, plaintext=True)
    assert listener_from(9092, "127.0.0.1:9092", "node1.example:9092").tls  # advertised off loopback


def test_listen_and_advertise_and_what_the_certificate_must_name() -> None:
    listener = listener_from(9092, "0.0.0.0:19500", "node1.example:29500")
    assert (listener.listen, listener.controller, listener.bootstrap) == (
        "0.0.0.0:19500", "0.0.0.0:19501", "node1.example:29500")
    assert listener.voter == "node1.example:19501"  # the broker reaches its controller where it is named
    assert listener.names == ("node1.example",) and listener.reach_host == "127.0.0.1"
    v6 = listener_from(9092, "[fd00::2]:19500")
    assert (v6.host, v6.bootstrap, v6.voter, v6.names) == ("fd00::2", "[fd00::2]:19500", "[fd00::2]:19501",
                                                           ("fd00::2",))
    named = listener_from(9092, "192.0.2.2:19500", "node1.example:19500")
    assert named.names == ("node1.example", "192.0.2.2")
    with pytest.raises(ConfigError, match="give --advertise"):
        listener_from(9092, "0.0.0.0:19500")
    with pytest.raises(ConfigError, match="wildcard"):
        listener_from(9092, "192.0.2.2:19500", "0.0.0.0:19500")
    with pytest.raises(ConfigError, match="--advertise needs --listen"):
        listener_from(9092, None, "node1.example:9092")
    with pytest.raises(ConfigError, match="is not HOST:PORT"):
        listener_from(9092, "192.0.2.2")


def test_the_command_line_refuses_clashing_flags() -> None:
    with pytest.raises(ConfigError, match="--listen ADDR:PORT or --port"):
        listener_of(args("--listen", "10.0.0.5:9092", "--port", "9092"), 9092)
    with pytest.raises(ConfigError, match="go together"):
        listener_of(args("--tls-ca", "ca.pem"), 9092)
    listener, operator = listener_of(args("--tls-ca", "c", "--tls-cert", "b", "--tls-key", "k"), 19500)
    assert listener.tls and operator is not None and operator.key == Path("k")  # own files imply TLS


def test_plain_listen_and_advertise_properties(tmp_path: Path) -> None:
    listener = listener_from(9092, "0.0.0.0:19500", "node1.example:19500", plaintext=True)
    secure = props(server_properties(tmp_path / "d", listener, passwords=complete({})))
    assert secure["listeners"] == "SASL_PLAINTEXT://0.0.0.0:19500,CONTROLLER://0.0.0.0:19501"
    assert secure["advertised.listeners"] == "SASL_PLAINTEXT://node1.example:19500"
    assert secure["controller.quorum.voters"] == "1@node1.example:19501"
    assert "ssl.keystore.location" not in secure
    plain = props(server_properties(tmp_path / "d", listener))
    assert plain["listener.security.protocol.map"] == "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT"


def test_tls_properties_make_every_listener_sasl_ssl(tmp_path: Path) -> None:
    listener = listener_from(9092, "192.0.2.2:19500")
    stores = Stores(ca=tmp_path / "ca.pem", keystore=tmp_path / "keystore.pem")
    text = server_properties(tmp_path / "d", listener, passwords=complete({}), tls=stores)
    found = props(text)
    assert found["listeners"] == "SASL_SSL://192.0.2.2:19500,CONTROLLER://192.0.2.2:19501"
    assert found["advertised.listeners"] == "SASL_SSL://192.0.2.2:19500"
    assert found["inter.broker.listener.name"] == "SASL_SSL"
    assert found["listener.security.protocol.map"] == "CONTROLLER:SASL_SSL,SASL_SSL:SASL_SSL"
    assert found["sasl.mechanism.controller.protocol"] == "PLAIN"  # its password now inside TLS
    assert "listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config" in found
    assert found["listener.name.sasl_ssl.max.connections"] == found["max.connections"]
    assert {k: found[k] for k in found if k.startswith("ssl.")} == {
        "ssl.keystore.type": "PEM", "ssl.keystore.location": str(stores.keystore),
        "ssl.truststore.type": "PEM", "ssl.truststore.location": str(stores.ca),
        "ssl.client.auth": "none", "ssl.endpoint.identification.algorithm": "https"}
    assert "password" not in "".join(k for k in found if k.startswith("ssl."))  # an unencrypted PEM key
    with pytest.raises(ConfigError, match="TLS listener needs"):
        server_properties(tmp_path / "d", listener, passwords=None, tls=stores)


def test_the_state_file_keeps_the_addresses_and_reads_an_older_one() -> None:
    old = BrokerState(pid=1, port=19092, controller_port=19093, secure=True)
    assert old.bootstrap == "127.0.0.1:19092" and not old.tls
    listener = listener_from(9092, "0.0.0.0:19500", "192.0.2.2:19500")
    state = BrokerState(1, 19500, 19501, True, listener.host, listener.bootstrap, listener.tls)
    assert state.bootstrap == "192.0.2.2:19500"
    assert state.same_place(listener)
    assert state.same_place(Listener(port=9092))  # `start` without flags: the running broker
    assert not state.same_place(listener_from(9092, "192.0.2.2:19500"))
    assert not old.same_place(listener_from(9092, "127.0.0.1:19092", tls=True))
