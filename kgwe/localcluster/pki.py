"""Throw-away PKI for the local control plane, made with kgwe.certs.x509 (KGWE's one certificate code).

kube-apiserver needs a serving certificate, a client CA (we authenticate as an admin client cert in
`system:masters`, so RBAC is on but never in our way) and a service-account signing key pair. ECDSA P-256
keys keep generation instant, which matters because every test session makes a fresh set. The CA key is kept
(mode 0600, in the cluster's own work directory) so the real node's components get identities of their own
(`issue`): the kubelet as `system:node:<name>` in `system:nodes`, kube-proxy as `system:kube-proxy`.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from kgwe.certs import x509
from kgwe.localcluster.privatefiles import write_private

ADMIN_USER = "kgwe-admin"
ADMIN_GROUP = "system:masters"
CA_NAME = "kgwe-test-ca"
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


def _write_pair(cert_path: Path, key_path: Path, pair: x509.KeyPair) -> None:
    """A certificate (0644) and its key (0600, created exclusively: never readable by others, not even for
    a moment, and never written through a link; kgwe.localcluster.privatefiles)."""
    cert_path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    write_private(cert_path, pair.cert_pem, 0o644)
    write_private(key_path, pair.key_pem)


def write_pki(directory: Path, valid_days: int = 7, serving_ips: Sequence[str] = ()) -> PkiFiles:
    """Create a CA, an apiserver serving cert, an admin client cert and an SA key pair in `directory`.

    The serving certificate is valid for loopback and `serving_ips` (the host address and the `kubernetes`
    Service's ClusterIP, when pods reach the apiserver)."""
    directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    now, valid = dt.datetime.now(dt.UTC), dt.timedelta(days=valid_days)
    ca = x509.new_ca(CA_NAME, now, valid)
    serving = x509.issue(
        ca, "kube-apiserver", usage="server", now=now, valid=valid,
        dns_names=_SERVER_DNS, ip_addresses=["127.0.0.1", "::1", *serving_ips],
    )  # fmt: skip
    admin = x509.issue(ca, ADMIN_USER, organization=ADMIN_GROUP, usage="client", now=now, valid=valid)
    sa_key = x509.new_key()
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
    _write_pair(files.ca_cert, files.ca_key, ca)
    _write_pair(files.serving_cert, files.serving_key, serving)
    _write_pair(files.admin_cert, files.admin_key, admin)
    write_private(files.sa_private_key, x509.key_pem(sa_key))
    write_private(files.sa_public_key, x509.public_key_pem(sa_key), 0o644)
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
    ca = x509.KeyPair(pki.ca_cert.read_bytes(), pki.ca_key.read_bytes())
    pair = x509.issue(
        ca, common_name, organization=organization, usage="server" if server else "client",
        now=dt.datetime.now(dt.UTC), valid=dt.timedelta(days=valid_days),
        dns_names=dns_names, ip_addresses=ips,
    )  # fmt: skip
    _write_pair(cert_path, key_path, pair)


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
        target.mkdir(mode=0o700, parents=True, exist_ok=True)
        write_private(target / "tls.crt", cert.read_bytes(), 0o644)
        write_private(target / "tls.key", key.read_bytes())
        write_private(target / "ca.crt", files.ca_cert.read_bytes(), 0o644)
    return server, client
