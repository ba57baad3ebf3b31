"""The local broker's TLS: a CA of its own and the broker's certificate, signed by it, naming every
address clients and the broker itself connect to (IP SANs for addresses, DNS SANs for names) — or
the operator's CA, certificate and key, checked the same way. Kafka reads them as PEM
(docs/security.md, "Broker authentication and ACLs").

Layout under HOME/broker/tls/ (folder 0700): ca.pem, ca.key (0600; only for a CA made here),
broker.pem (the certificate, then the CA), broker.key (unencrypted PKCS#8, 0600) and keystore.pem
(key and chain in the one file Kafka's PEM key store reads, 0600).
"""

from __future__ import annotations

import datetime as dt
import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.asymmetric.types import PrivateKeyTypes
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from trainmedic.bus.addresses import ip_of
from trainmedic.common.errors import ConfigError

CA_DAYS = 3650
CERT_DAYS = 825
RENEW_DAYS = 30  # a certificate closer than this to its end is made anew at start
PEM = serialization.Encoding.PEM


@dataclass(frozen=True)
class OperatorTls:
    """The operator's own files (--tls-ca, --tls-cert, --tls-key): used instead of a CA made here."""

    ca: Path
    cert: Path
    key: Path


@dataclass(frozen=True)
class Stores:
    """The files Kafka reads: the CA (trust store) and the key with its chain (key store)."""

    ca: Path
    keystore: Path


def new_ca(now: dt.datetime) -> tuple[bytes, bytes]:
    """A new CA: its key (PKCS#8 PEM) and its self-signed certificate (PEM)."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "trainmedic broker CA")])
    cert = (_builder(name, name, key.public_key(), now, CA_DAYS)
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(_usage(cert_sign=True), critical=True)
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
            .sign(key, hashes.SHA256()))
    return _key_pem(key), cert.public_bytes(PEM)


def new_cert(ca_key_pem: bytes, ca_pem: bytes, names: Iterable[str], now: dt.datetime) -> tuple[bytes, bytes]:
    """A broker key and its certificate, signed by the CA, for `names` (addresses and host names)."""
    ca_key = serialization.load_pem_private_key(ca_key_pem, password=None)
    ca = x509.load_pem_x509_certificate(ca_pem)
    names = list(names)
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, names[0][:64])])
    cert = (_builder(subject, ca.subject, key.public_key(), now, CERT_DAYS)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(_usage(cert_sign=False), critical=True)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH,
                                                  ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False)
            .add_extension(x509.SubjectAlternativeName([_general_name(n) for n in names]), critical=False)
            .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca.public_key()),
                           critical=False)
            .sign(ca_key, hashes.SHA256()))
    return _key_pem(key), cert.public_bytes(PEM)


def names_of(cert_pem: bytes) -> set[str]:
    """The DNS and IP names a certificate carries (addresses in their normal form)."""
    cert = x509.load_pem_x509_certificate(cert_pem)
    try:
        sans = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        return set()
    return {*(n.lower() for n in sans.get_values_for_type(x509.DNSName)),
            *(str(ip) for ip in sans.get_values_for_type(x509.IPAddress))}


def problems(ca_pem: bytes, cert_pem: bytes, key_pem: bytes | None, names: Iterable[str],
             now: dt.datetime, margin_days: int = 0) -> list[str]:
    """What is wrong with a certificate for these `names`: not signed by the CA, a name missing, not
    valid `now` (or within `margin_days` of its end), a key that is not its. Empty: it serves."""
    ca = x509.load_pem_x509_certificate(ca_pem)
    cert = x509.load_pem_x509_certificate(cert_pem)
    found: list[str] = []
    try:
        cert.verify_directly_issued_by(ca)
    except (InvalidSignature, ValueError, TypeError):  # another signature, issuer or key type
        found.append(f"it is not signed by the CA ({ca.subject.rfc4514_string()})")
    missing = [n for n in names if _normal(n) not in names_of(cert_pem)]
    if missing:
        found.append(f"it does not name {', '.join(missing)} (subject alternative names)")
    if not cert.not_valid_before_utc <= now <= cert.not_valid_after_utc - dt.timedelta(days=margin_days):
        found.append(f"it is valid from {cert.not_valid_before_utc:%Y-%m-%d} to "
                     f"{cert.not_valid_after_utc:%Y-%m-%d} only")
    if key_pem is not None:
        try:
            key = serialization.load_pem_private_key(key_pem, password=None)
        except (ValueError, TypeError) as err:
            found.append(f"its key cannot be read unencrypted ({err})")
        else:
            if key.public_key().public_bytes(PEM, _SPKI) != cert.public_key().public_bytes(PEM, _SPKI):
                found.append("the key is not the certificate's")
    return found


def prepare(folder: Path, names: tuple[str, ...], now: dt.datetime,
            operator: OperatorTls | None = None) -> Stores:
    """The broker's TLS files in `folder` for `names`: the operator's (checked), else a CA made here
    once and a certificate made anew when its names change or its end nears."""
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    folder.chmod(0o700)
    ca_file, ca_key = folder / "ca.pem", folder / "ca.key"
    cert_file, key_file = folder / "broker.pem", folder / "broker.key"
    if operator is not None:
        ca_pem, cert_pem, key_pem = _operators(operator, names, now)
        ca_key.unlink(missing_ok=True)  # a CA made here before: not this broker's any more
    else:
        if not (ca_key.exists() and ca_file.exists()):
            made_key, made_ca = new_ca(now)
            _write(ca_key, made_key, 0o600)
            _write(ca_file, made_ca, 0o644)
            cert_file.unlink(missing_ok=True)
        ca_pem = ca_file.read_bytes()
        if _still_serves(ca_pem, cert_file, key_file, names, now):
            cert_pem, key_pem = cert_file.read_bytes(), key_file.read_bytes()
        else:
            key_pem, cert_pem = new_cert(ca_key.read_bytes(), ca_pem, names, now)
            cert_pem += ca_pem
    _write(ca_file, ca_pem, 0o644)
    _write(key_file, key_pem, 0o600)
    _write(cert_file, cert_pem, 0o644)
    keystore = folder / "keystore.pem"
    _write(keystore, key_pem + cert_pem, 0o600)
    return Stores(ca=ca_file, keystore=keystore)


def _operators(operator: OperatorTls, names: tuple[str, ...], now: dt.datetime) -> tuple[bytes, bytes, bytes]:
    """The operator's CA, certificate (chain) and key (as PKCS#8), or ConfigError saying what is wrong."""
    ca_pem, cert_pem, key_pem = (_read(path, what) for path, what in (
        (operator.ca, "--tls-ca"), (operator.cert, "--tls-cert"), (operator.key, "--tls-key")))
    try:
        wrong = problems(ca_pem, cert_pem, key_pem, names, now)
    except ValueError as err:  # not PEM certificates at all
        raise ConfigError(f"--tls-ca/--tls-cert: {err}") from None
    if wrong:
        raise ConfigError(f"the certificate {operator.cert} cannot serve this broker: {'; '.join(wrong)}")
    return ca_pem, cert_pem, _key_pem(serialization.load_pem_private_key(key_pem, password=None))


def _still_serves(ca_pem: bytes, cert_file: Path, key_file: Path, names: tuple[str, ...],
                  now: dt.datetime) -> bool:
    """The certificate made here before serves on: signed by this CA, for exactly these names, not near
    its end."""
    if not (cert_file.exists() and key_file.exists()):
        return False
    cert_pem = cert_file.read_bytes()
    exact = names_of(cert_pem) == {_normal(n) for n in names}
    return exact and not problems(ca_pem, cert_pem, None, names, now, RENEW_DAYS)


def properties(stores: Stores) -> str:
    """server.properties' TLS lines: PEM key and trust stores (an unencrypted key needs no password),
    no client certificates (clients authenticate with SASL), host names verified."""
    return f"""\
ssl.keystore.type=PEM
ssl.keystore.location={stores.keystore}
ssl.truststore.type=PEM
ssl.truststore.location={stores.ca}
ssl.client.auth=none
ssl.endpoint.identification.algorithm=https
"""


_SPKI = serialization.PublicFormat.SubjectPublicKeyInfo


def _builder(subject: x509.Name, issuer: x509.Name, public_key: ec.EllipticCurvePublicKey,
             now: dt.datetime, days: int) -> x509.CertificateBuilder:
    return (x509.CertificateBuilder().subject_name(subject).issuer_name(issuer).public_key(public_key)
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(minutes=5)).not_valid_after(now + dt.timedelta(days=days)))


def _usage(cert_sign: bool) -> x509.KeyUsage:
    return x509.KeyUsage(digital_signature=not cert_sign, content_commitment=False, key_encipherment=False,
                         data_encipherment=False, key_agreement=not cert_sign, key_cert_sign=cert_sign,
                         crl_sign=cert_sign, encipher_only=False, decipher_only=False)


def _general_name(name: str) -> x509.GeneralName:
    ip = ip_of(name)
    return x509.IPAddress(ip) if ip is not None else x509.DNSName(name.lower())


def _normal(name: str) -> str:
    ip = ip_of(name)
    return str(ip) if ip is not None else name.lower()


def _key_pem(key: PrivateKeyTypes) -> bytes:
    """A private key as unencrypted PKCS#8 PEM ("PRIVATE KEY"), the one form Kafka's PEM store parses
    without a password."""
    return key.private_bytes(PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())


def _read(path: Path, what: str) -> bytes:
    try:
        return path.read_bytes()
    except OSError as err:
        raise ConfigError(f"{what} {path}: {err.strerror or err}") from None


def _write(path: Path, data: bytes, mode: int) -> None:
    """Replace `path` with `data` at `mode` (made at that mode: a key is never readable by others)."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.unlink(missing_ok=True)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
    with os.fdopen(fd, "wb") as out:
        out.write(data)
    tmp.chmod(mode)
    tmp.replace(path)
