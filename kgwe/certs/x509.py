"""X.509 as data: make a CA, issue a serving or client certificate from it, read back what a PEM holds.

ECDSA P-256 keys keep generation instant. Every certificate carries subject and authority key identifiers:
Python >= 3.13 verifies strictly (RFC 5280) and refuses certificates without an Authority Key Identifier.
No I/O: callers store the PEM bytes (files for the local cluster, Secrets for the controller).
"""

from __future__ import annotations

import datetime as dt
import ipaddress
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

Usage = Literal["server", "client"]
# Tolerated clock skew between the issuer and whoever verifies: certificates start this long ago.
BACKDATE = dt.timedelta(minutes=5)
# A bundle read from a Secret is bounded: KGWE's own bundles hold two or three certificates.
MAX_BUNDLE_BYTES = 64 * 1024
MAX_BUNDLE_CERTS = 16
_PEM_END = b"-----END CERTIFICATE-----"
_EKU = {"server": ExtendedKeyUsageOID.SERVER_AUTH, "client": ExtendedKeyUsageOID.CLIENT_AUTH}


class CertificateError(ValueError):
    """PEM data that is not the certificate or key it should be."""


@dataclass(frozen=True)
class KeyPair:
    """A certificate and its private key, PEM encoded (key in PKCS#8, unencrypted)."""

    cert_pem: bytes
    key_pem: bytes


@dataclass(frozen=True)
class CertInfo:
    """What KGWE needs to know about a certificate to decide whether it still fits."""

    common_name: str
    issuer_common_name: str
    not_before: dt.datetime
    not_after: dt.datetime
    is_ca: bool
    dns_names: tuple[str, ...]
    ip_addresses: tuple[str, ...]
    usages: frozenset[str]  # "server" and/or "client"
    serial_number: int

    @property
    def lifetime(self) -> dt.timedelta:
        return self.not_after - self.not_before


def new_key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


def public_key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )


def _name(common_name: str, organization: str | None = None) -> x509.Name:
    attrs = [x509.NameAttribute(NameOID.COMMON_NAME, common_name)]
    if organization:
        attrs.append(x509.NameAttribute(NameOID.ORGANIZATION_NAME, organization))
    return x509.Name(attrs)


def _builder(
    subject: x509.Name,
    issuer: x509.Name,
    key: ec.EllipticCurvePrivateKey,
    issuer_key: ec.EllipticCurvePrivateKey,
    now: dt.datetime,
    until: dt.datetime,
    is_ca: bool,
) -> x509.CertificateBuilder:
    return (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - BACKDATE)
        .not_valid_after(until)
        .add_extension(x509.BasicConstraints(ca=is_ca, path_length=None), critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(issuer_key.public_key()), critical=False
        )
    )


def new_ca(common_name: str, now: dt.datetime, valid: dt.timedelta) -> KeyPair:
    """A self-signed CA valid from `now` (less BACKDATE) for `valid`."""
    key = new_key()
    name = _name(common_name)
    cert = (
        _builder(name, name, key, key, now, now + valid, is_ca=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .sign(key, hashes.SHA256())
    )
    return KeyPair(cert.public_bytes(serialization.Encoding.PEM), key_pem(key))


def issue(
    ca: KeyPair,
    common_name: str,
    *,
    usage: Usage,
    now: dt.datetime,
    valid: dt.timedelta,
    organization: str | None = None,
    dns_names: Sequence[str] = (),
    ip_addresses: Sequence[str] = (),
    key: ec.EllipticCurvePrivateKey | None = None,
) -> KeyPair:
    """A serving or client certificate signed by `ca`, never valid past the CA itself."""
    ca_cert = _load_cert(ca.cert_pem)
    ca_key = _load_key(ca.key_pem)
    key = key or new_key()
    until = min(now + valid, ca_cert.not_valid_after_utc)
    builder = _builder(
        _name(common_name, organization), ca_cert.subject, key, ca_key, now, until, is_ca=False
    ).add_extension(x509.ExtendedKeyUsage([_EKU[usage]]), critical=False)
    names: list[x509.GeneralName] = [x509.DNSName(n) for n in dns_names]
    names += [x509.IPAddress(ipaddress.ip_address(a)) for a in ip_addresses]
    if names:
        builder = builder.add_extension(x509.SubjectAlternativeName(names), critical=False)
    cert = builder.sign(ca_key, hashes.SHA256())
    return KeyPair(cert.public_bytes(serialization.Encoding.PEM), key_pem(key))


def _load_cert(pem: bytes) -> x509.Certificate:
    try:
        return x509.load_pem_x509_certificate(pem)
    except ValueError as exc:
        raise CertificateError(f"not a PEM certificate: {exc}") from None


def _load_key(pem: bytes) -> ec.EllipticCurvePrivateKey:
    try:
        key = serialization.load_pem_private_key(pem, password=None)
    except (ValueError, TypeError) as exc:
        raise CertificateError(f"not an unencrypted PEM private key: {exc}") from None
    if not isinstance(key, ec.EllipticCurvePrivateKey):
        raise CertificateError("not an ECDSA private key")
    return key


def _common_name(name: x509.Name) -> str:
    values = name.get_attributes_for_oid(NameOID.COMMON_NAME)
    return str(values[0].value) if values else ""


def read(pem: bytes) -> CertInfo:
    """What the (first) certificate in `pem` says; CertificateError when it is not one."""
    cert = _load_cert(pem)
    try:
        is_ca = cert.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
    except x509.ExtensionNotFound:
        is_ca = False
    dns: tuple[str, ...] = ()
    ips: tuple[str, ...] = ()
    try:
        san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
        dns = tuple(san.get_values_for_type(x509.DNSName))
        ips = tuple(str(a) for a in san.get_values_for_type(x509.IPAddress))
    except x509.ExtensionNotFound:
        pass
    try:
        eku = cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
        usages = frozenset(u for u, oid in _EKU.items() if oid in eku)
    except x509.ExtensionNotFound:
        usages = frozenset()
    return CertInfo(
        common_name=_common_name(cert.subject),
        issuer_common_name=_common_name(cert.issuer),
        not_before=cert.not_valid_before_utc,
        not_after=cert.not_valid_after_utc,
        is_ca=is_ca,
        dns_names=dns,
        ip_addresses=ips,
        usages=usages,
        serial_number=cert.serial_number,
    )


def split_bundle(pem: bytes) -> list[bytes]:
    """The certificates of a PEM bundle, each as its own PEM (text between them is dropped); bounded."""
    if len(pem) > MAX_BUNDLE_BYTES:
        raise CertificateError(f"bundle larger than {MAX_BUNDLE_BYTES} bytes")
    certs = []
    rest = pem
    while (start := rest.find(b"-----BEGIN CERTIFICATE-----")) >= 0:
        end = rest.find(_PEM_END, start)
        if end < 0:
            raise CertificateError("unterminated certificate in bundle")
        certs.append(rest[start : end + len(_PEM_END)] + b"\n")
        rest = rest[end + len(_PEM_END) :]
        if len(certs) > MAX_BUNDLE_CERTS:
            raise CertificateError(f"bundle holds more than {MAX_BUNDLE_CERTS} certificates")
    return certs


def signed_by(cert_pem: bytes, ca_pem: bytes) -> bool:
    """Whether `ca_pem`'s key signed `cert_pem` (and the names chain up)."""
    try:
        _load_cert(cert_pem).verify_directly_issued_by(_load_cert(ca_pem))
    except (CertificateError, ValueError, TypeError, InvalidSignature):
        return False
    return True


def key_matches(cert_pem: bytes, key_pem_bytes: bytes) -> bool:
    """Whether the private key belongs to the certificate."""
    try:
        cert_key = _load_cert(cert_pem).public_key()
        key = _load_key(key_pem_bytes)
    except CertificateError:
        return False
    return cert_key.public_bytes(
        serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    ) == key.public_key().public_bytes(
        serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    )
