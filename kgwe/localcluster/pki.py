"""Throw-away PKI for the local control plane, made with `cryptography`.

kube-apiserver needs a serving certificate, a client CA (we authenticate as an admin client cert in
`system:masters`, so RBAC is on but never in our way) and a service-account signing key pair. ECDSA P-256
keys keep generation instant, which matters because every test session makes a fresh set. The CA key is kept
(mode 0600, in the cluster's own work directory) so the real node's components get identities of their own
(`issue`): the kubelet as `system:node:<name>` in `system:nodes`, kube-proxy as `system:kube-proxy`.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

ADMIN_USER = "kgwe-admin"
ADMIN_GROUP = "system:masters"
_SERVER_DNS = (
    "localhost",
    "kubernetes",
    "kubernetes.default",
    "kubernetes.default.svc",
    "kubernetes.default.svc.cluster.local",
)


@dataclass(frozen=True)
class PkiFiles:
    """Paths of the PEM files written by `write_pki`."""

    ca_cert: Path
    serving_cert: Path
    serving_key: Path
    admin_cert: Path
    admin_key: Path
    sa_public_key: Path
    sa_private_key: Path
    ca_key: Path


def _key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _name(common_name: str, organization: str | None = None) -> x509.Name:
    attrs = [x509.NameAttribute(NameOID.COMMON_NAME, common_name)]
    if organization:
        attrs.append(x509.NameAttribute(NameOID.ORGANIZATION_NAME, organization))
    return x509.Name(attrs)


def _write_key(path: Path, key: ec.EllipticCurvePrivateKey) -> None:
    path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
    )
    path.chmod(0o600)


def _write_cert(path: Path, cert: x509.Certificate) -> None:
    path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))


def _builder(
    subject: x509.Name,
    issuer: x509.Name,
    key: ec.EllipticCurvePrivateKey,
    ca_key: ec.EllipticCurvePrivateKey,
    is_ca: bool,
    valid_days: int,
) -> x509.CertificateBuilder:
    now = dt.datetime.now(dt.UTC) - dt.timedelta(minutes=5)  # tolerate small clock skew
    return (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now)
        .not_valid_after(now + dt.timedelta(days=valid_days))
        .add_extension(x509.BasicConstraints(ca=is_ca, path_length=None), critical=True)
        # Key identifiers as real cluster PKIs carry them: Python >= 3.13 verifies strictly (RFC 5280)
        # and refuses certificates without an Authority Key Identifier.
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False
        )
    )


def _san(dns_names: Sequence[str], ips: Sequence[str]) -> x509.SubjectAlternativeName:
    return x509.SubjectAlternativeName(
        [x509.DNSName(n) for n in dns_names] + [x509.IPAddress(ipaddress.ip_address(ip)) for ip in ips]
    )


def write_pki(directory: Path, valid_days: int = 7, serving_ips: Sequence[str] = ()) -> PkiFiles:
    """Create a CA, an apiserver serving cert, an admin client cert and an SA key pair in `directory`.

    The serving certificate is valid for loopback and `serving_ips` (the host address and the `kubernetes`
    Service's ClusterIP, when pods reach the apiserver)."""
    directory.mkdir(parents=True, exist_ok=True)
    ca_key = _key()
    ca_name = _name("kgwe-test-ca")

    def builder(subject: x509.Name, key: ec.EllipticCurvePrivateKey, is_ca: bool) -> x509.CertificateBuilder:
        return _builder(subject, ca_name, key, ca_key, is_ca, valid_days)

    ca_cert = (
        builder(ca_name, ca_key, is_ca=True)
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
        .sign(ca_key, hashes.SHA256())
    )

    def leaf(
        subject: x509.Name,
        key: ec.EllipticCurvePrivateKey,
        usage: x509.ObjectIdentifier,
        san: x509.SubjectAlternativeName | None,
    ) -> x509.Certificate:
        b = builder(subject, key, is_ca=False).add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
        if san is not None:
            b = b.add_extension(san, critical=False)
        return b.sign(ca_key, hashes.SHA256())

    serving_key = _key()
    serving_san = _san(_SERVER_DNS, ["127.0.0.1", "::1", *serving_ips])
    serving_cert = leaf(_name("kube-apiserver"), serving_key, ExtendedKeyUsageOID.SERVER_AUTH, serving_san)
    admin_key = _key()
    admin_cert = leaf(_name(ADMIN_USER, ADMIN_GROUP), admin_key, ExtendedKeyUsageOID.CLIENT_AUTH, None)
    sa_key = _key()

    files = PkiFiles(
        ca_cert=directory / "ca.crt",
        serving_cert=directory / "apiserver.crt",
        serving_key=directory / "apiserver.key",
        admin_cert=directory / "admin.crt",
        admin_key=directory / "admin.key",
        sa_public_key=directory / "sa.pub",
        sa_private_key=directory / "sa.key",
        ca_key=directory / "ca.key",
    )
    _write_key(files.ca_key, ca_key)
    _write_cert(files.ca_cert, ca_cert)
    _write_cert(files.serving_cert, serving_cert)
    _write_key(files.serving_key, serving_key)
    _write_cert(files.admin_cert, admin_cert)
    _write_key(files.admin_key, admin_key)
    _write_key(files.sa_private_key, sa_key)
    files.sa_public_key.write_bytes(
        sa_key.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
    )
    return files


def issue(
    pki: PkiFiles,
    cert_path: Path,
    key_path: Path,
    common_name: str,
    organization: str | None = None,
    *,
    server: bool = False,
    dns_names: Sequence[str] = (),
    ips: Sequence[str] = (),
    valid_days: int = 7,
) -> None:
    """A leaf certificate signed by the PKI's CA: a client identity (CN = user, O = group), or with
    `server` a serving certificate for `dns_names` and `ips`."""
    ca_key = serialization.load_pem_private_key(pki.ca_key.read_bytes(), password=None)
    ca_cert = x509.load_pem_x509_certificate(pki.ca_cert.read_bytes())
    if not isinstance(ca_key, ec.EllipticCurvePrivateKey):
        raise ValueError(f"{pki.ca_key} is not an ECDSA key")
    key = _key()
    usage = ExtendedKeyUsageOID.SERVER_AUTH if server else ExtendedKeyUsageOID.CLIENT_AUTH
    b = _builder(_name(common_name, organization), ca_cert.subject, key, ca_key, False, valid_days)
    b = b.add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
    if dns_names or ips:
        b = b.add_extension(_san(dns_names, ips), critical=False)
    cert_path.parent.mkdir(parents=True, exist_ok=True)
    _write_cert(cert_path, b.sign(ca_key, hashes.SHA256()))
    _write_key(key_path, key)


def extender_tls_flags(server_dir: Path) -> list[str]:
    """`kgwe extender` flags serving HTTPS from a `write_mtls_dirs` server directory, client certificate
    required."""
    return [
        "--tls-cert-file",
        str(server_dir / "tls.crt"),
        "--tls-key-file",
        str(server_dir / "tls.key"),
        "--client-ca-file",
        str(server_dir / "ca.crt"),
    ]


def write_mtls_dirs(directory: Path) -> tuple[Path, Path]:
    """Two directories laid out as Kubernetes TLS Secrets mount them (tls.crt, tls.key, ca.crt): a serving
    identity for 127.0.0.1/localhost and a client identity, both signed by one fresh CA."""
    files = write_pki(directory / "pki")
    server, client = directory / "server", directory / "client"
    for target, cert, key in (
        (server, files.serving_cert, files.serving_key),
        (client, files.admin_cert, files.admin_key),
    ):
        target.mkdir(parents=True, exist_ok=True)
        (target / "tls.crt").write_bytes(cert.read_bytes())
        (target / "tls.key").write_bytes(key.read_bytes())
        (target / "tls.key").chmod(0o600)
        (target / "ca.crt").write_bytes(files.ca_cert.read_bytes())
    return server, client
