"""The local broker's TLS files: a CA made once (its key 0600), the broker's certificate signed by it
naming every address (IP SANs for addresses, DNS for names), kept across starts and made anew when the
names change; the operator's own files checked before use. Without Java."""

from __future__ import annotations

import datetime as dt
import ipaddress
import stat
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import serialization

from trainmedic.common.errors import ConfigError
from trainmedic.local.broker_tls import OperatorTls, names_of, new_ca, new_cert, prepare, problems

NOW = dt.datetime(2025, 6, 1, tzinfo=dt.UTC)


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_the_certificate_names_each_address_and_its_ca_signs_it(tmp_path: Path) -> None:
    stores = prepare(tmp_path / "tls", ("node1.example", "192.0.2.2", "fd00::2"), NOW)
    cert = x509.load_pem_x509_certificate((tmp_path / "tls" / "broker.pem").read_bytes())
    ca = x509.load_pem_x509_certificate(stores.ca.read_bytes())
    cert.verify_directly_issued_by(ca)  # raises if the CA did not sign it
    sans = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert sans.get_values_for_type(x509.DNSName) == ["node1.example"]
    assert sans.get_values_for_type(x509.IPAddress) == [ipaddress.ip_address("192.0.2.2"),
                                                        ipaddress.ip_address("fd00::2")]
    assert ca.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
    assert not cert.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
    assert (mode(tmp_path / "tls"), mode(tmp_path / "tls" / "ca.key"), mode(stores.keystore)) == (
        0o700, 0o600, 0o600)
    keystore = stores.keystore.read_text()
    assert keystore.startswith("-----BEGIN PRIVATE KEY-----")  # unencrypted PKCS#8: Kafka's PEM store
    assert keystore.count("BEGIN CERTIFICATE") == 2  # the certificate, then its CA
    assert problems(stores.ca.read_bytes(), (tmp_path / "tls" / "broker.pem").read_bytes(),
                    (tmp_path / "tls" / "broker.key").read_bytes(), ["192.0.2.2"], NOW) == []


def test_a_later_start_keeps_the_files_and_new_names_get_a_new_certificate(tmp_path: Path) -> None:
    folder = tmp_path / "tls"
    prepare(folder, ("127.0.0.1",), NOW)
    first = {p.name: p.read_bytes() for p in folder.iterdir()}
    prepare(folder, ("127.0.0.1",), NOW + dt.timedelta(days=1))
    assert {p.name: p.read_bytes() for p in folder.iterdir()} == first
    prepare(folder, ("192.0.2.2",), NOW)
    assert (folder / "ca.pem").read_bytes() == first["ca.pem"]  # the CA stays: role files keep trusting it
    assert names_of((folder / "broker.pem").read_bytes()) == {"192.0.2.2"}
    assert (folder / "broker.key").read_bytes() != first["broker.key"]
    prepare(folder, ("192.0.2.2",), NOW + dt.timedelta(days=820))  # near its end: made anew
    cert = x509.load_pem_x509_certificate((folder / "broker.pem").read_bytes())
    assert cert.not_valid_after_utc > NOW + dt.timedelta(days=1000)


def traditional(key_pem: bytes) -> bytes:
    """The key as `openssl` often writes it ("EC PRIVATE KEY", not PKCS#8)."""
    key = serialization.load_pem_private_key(key_pem, password=None)
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.TraditionalOpenSSL,
                             serialization.NoEncryption())


def test_the_operators_files_are_checked_before_the_broker_uses_them(tmp_path: Path) -> None:
    ca_key, ca = new_ca(NOW)
    key, cert = new_cert(ca_key, ca, ["node1.example"], NOW)
    files = OperatorTls(tmp_path / "ca.pem", tmp_path / "cert.pem", tmp_path / "key.pem")
    other_key, other_ca = new_ca(NOW)
    files.ca.write_bytes(other_ca)
    files.cert.write_bytes(cert)
    files.key.write_bytes(traditional(other_key))
    wrong = r"not signed by the CA \(CN=trainmedic broker CA\); the key is not the certificate's"
    with pytest.raises(ConfigError, match=wrong):
        prepare(tmp_path / "tls", ("node1.example",), NOW, files)
    files.ca.write_bytes(ca)
    files.key.write_bytes(traditional(key))
    with pytest.raises(ConfigError, match="does not name 192.0.2.2"):
        prepare(tmp_path / "tls", ("node1.example", "192.0.2.2"), NOW, files)
    with pytest.raises(ConfigError, match="--tls-key .*No such file"):
        prepare(tmp_path / "tls", ("node1.example",), NOW, OperatorTls(files.ca, files.cert, tmp_path / "no"))
    prepare(tmp_path / "tls", ("node1.example",), NOW)  # a CA made here first ...
    stores = prepare(tmp_path / "tls", ("node1.example",), NOW, files)
    assert stores.ca.read_bytes() == ca and not (tmp_path / "tls" / "ca.key").exists()  # ... is gone
    keystore = stores.keystore.read_bytes()
    assert keystore.startswith(b"-----BEGIN PRIVATE KEY-----") and keystore.endswith(cert)  # as PKCS#8
