"""Certificates for the TLS tests, made on the spot with the ``cryptography`` package.

How this works
--------------
``make_certs(DIR)`` writes a test CA and the server certificates the tests try: one for
127.0.0.1/localhost signed by that CA (``good``), one for another host name (``wrong_host``), one
that has expired (``expired``), one from a second CA nobody was told to believe (``unknown_ca``),
and a key that belongs to no certificate here (``stray_key``). Keys are EC P-256: quick to make,
so every test module can have its own set. Nothing is kept between runs.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID


@dataclass(frozen=True)
class Pair:
    cert: str
    key: str


@dataclass(frozen=True)
class Certs:
    ca: str  # the CA the clients are told to believe (--ca)
    good: Pair
    wrong_host: Pair
    expired: Pair
    unknown_ca: Pair
    stray_key: str


def _key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _name(common: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common)])


def _write_key(path: Path, key: ec.EllipticCurvePrivateKey) -> str:
    path.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                       serialization.NoEncryption()))
    path.chmod(0o644)  # Mosquitto started as root reads it as its own user
    return str(path)


def _write_cert(path: Path, cert: x509.Certificate) -> str:
    path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    path.chmod(0o644)
    return str(path)


def _ca(common: str, now: dt.datetime) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    key = _key()
    cert = (x509.CertificateBuilder().subject_name(_name(common)).issuer_name(_name(common))
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(days=1)).not_valid_after(now + dt.timedelta(days=30))
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .add_extension(x509.KeyUsage(digital_signature=True, content_commitment=False, key_encipherment=False,
                                         data_encipherment=False, key_agreement=False, key_cert_sign=True,
                                         crl_sign=True, encipher_only=False, decipher_only=False), critical=True)
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
            .sign(key, hashes.SHA256()))
    return cert, key


def _server(directory: Path, stem: str, ca: tuple[x509.Certificate, ec.EllipticCurvePrivateKey],
            names: list[str], not_before: dt.datetime, not_after: dt.datetime) -> Pair:
    ca_cert, ca_key = ca
    key = _key()
    alt: list[x509.GeneralName] = []
    for n in names:
        try:
            alt.append(x509.IPAddress(ipaddress.ip_address(n)))
        except ValueError:
            alt.append(x509.DNSName(n))
    cert = (x509.CertificateBuilder().subject_name(_name(names[0])).issuer_name(ca_cert.subject)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(not_before).not_valid_after(not_after)
            .add_extension(x509.SubjectAlternativeName(alt), critical=False)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage([x509.oid.ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
            .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False)
            .sign(ca_key, hashes.SHA256()))
    return Pair(_write_cert(directory / f"{stem}.pem", cert), _write_key(directory / f"{stem}.key", key))


def make_certs(directory: Path, also: tuple[str, ...] = ()) -> Certs:
    """The set (see the module header); ``also``: more names or addresses the good ones are for."""
    directory.mkdir(parents=True, exist_ok=True)
    now = dt.datetime.now(dt.timezone.utc)
    ca = _ca("blink test CA", now)
    other = _ca("a CA nobody believes", now)
    here = ["localhost", "127.0.0.1", *also]
    soon = now + dt.timedelta(days=10)
    return Certs(
        ca=_write_cert(directory / "ca.pem", ca[0]),
        good=_server(directory, "good", ca, here, now - dt.timedelta(hours=1), soon),
        wrong_host=_server(directory, "wrong-host", ca, ["game.example.org"], now - dt.timedelta(hours=1), soon),
        expired=_server(directory, "expired", ca, here, now - dt.timedelta(days=20), now - dt.timedelta(days=10)),
        unknown_ca=_server(directory, "unknown-ca", other, here, now - dt.timedelta(hours=1), soon),
        stray_key=_write_key(directory / "stray.key", _key()),
    )
