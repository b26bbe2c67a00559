"""Git credentials turned into a git process environment, never into URLs or on-disk git config.

HTTPS tokens travel as an `http.<url>.extraHeader` passed through GIT_CONFIG_* variables (git >= 2.31), so
the token shows up neither in `.git/config`, nor in the remote URL, nor in error messages. SSH keys are
written to a private temporary file and used through GIT_SSH_COMMAND. The Secret layout follows Flux's
(`username`/`password`, `bearerToken`, `identity`, `known_hosts`), so existing Secrets can be reused.

Credentials are bound to the hosts they are for (`hosts`; like Argo CD's `url` on a repository Secret): git
gets them only for a URL on one of those hosts, the header is scoped to that URL's origin, and git never
follows a redirect, so nothing sends them to another host. Every network git call also has its target
checked first (kgwe.gitops.gitcmd.check_target) and, for https, pinned to the addresses checked.
"""

from __future__ import annotations

import base64
import os
import re
import shlex
import shutil
import tempfile
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass

from kgwe.errors import KgweError
from kgwe.gitops.gitcmd import (
    Network,
    Origin,
    UnsafeGitArgument,
    check_target,
    resolve_pin,
    url_origin,
)

_HOST = re.compile(r"^[a-z0-9]([a-z0-9.-]*[a-z0-9])?(:[0-9]{1,5})?$")


class CredentialsNotBound(UnsafeGitArgument):
    """Credentials would go to a host they are not bound to."""


def parse_hosts(text: str) -> tuple[str, ...]:
    """`host` or `host:port` names, separated by commas or spaces (lowercased); ValueError names a bad one."""
    hosts = tuple(h.lower() for h in re.split(r"[\s,]+", text.strip()) if h)
    for host in hosts:
        if not _HOST.match(host):
            raise ValueError(f"{host!r} is not a host name (host or host:port)")
    return hosts


@dataclass(frozen=True)
class GitCredentials:
    username: str | None = None
    password: str | None = None  # a password or a personal access token
    bearer_token: str | None = None
    ssh_identity: bytes | None = None  # private key, OpenSSH or PEM
    ssh_known_hosts: bytes | None = None
    hosts: tuple[str, ...] = ()  # `host` / `host:port` these may be sent to; none: to no host at all

    def __repr__(self) -> str:  # never print secrets in logs or tracebacks
        kinds = [k for k in ("password", "bearer_token", "ssh_identity") if getattr(self, k)]
        return f"GitCredentials(username={self.username!r}, has={kinds}, hosts={list(self.hosts)})"

    @property
    def secret(self) -> bool:
        """Whether there is anything to send (a known_hosts file alone is not a secret)."""
        return bool(self.password or self.bearer_token or self.ssh_identity)

    def check_bound(self, origin: Origin | None) -> None:
        """CredentialsNotBound unless `origin` is one of the hosts these credentials are for."""
        if not self.secret:
            return
        if origin is None or origin.name not in self.hosts:
            where = origin.name if origin is not None else "a local repository"
            bound = ", ".join(self.hosts) or "no host"
            raise CredentialsNotBound(
                f"the Git credentials are bound to {bound}, not to {where}; they are not sent"
            )

    @classmethod
    def from_secret_data(cls, data: Mapping[str, str | bytes]) -> GitCredentials:
        """From a Kubernetes Secret's `.data` (base64 strings) or already-decoded bytes/str values."""

        def value(key: str) -> bytes | None:
            raw = data.get(key)
            if raw is None:
                return None
            if isinstance(raw, bytes):
                return raw
            try:
                return base64.b64decode(raw, validate=True)
            except ValueError as exc:
                raise KgweError(f"git secret key {key!r} is not valid base64") from exc

        def text(key: str) -> str | None:
            raw = value(key)
            return raw.decode().strip() if raw is not None else None

        return cls(
            username=text("username"),
            password=text("password"),
            bearer_token=text("bearerToken"),
            ssh_identity=value("identity"),
            ssh_known_hosts=value("known_hosts"),
        )

    @classmethod
    def from_env(cls, environ: Mapping[str, str] = os.environ) -> GitCredentials:
        """For local use: KGWE_GIT_USERNAME/KGWE_GIT_TOKEN/KGWE_GIT_SSH_KEY_FILE/KGWE_GIT_KNOWN_HOSTS_FILE,
        sent only to the hosts in KGWE_GIT_HOSTS."""

        def read(name: str) -> bytes | None:
            path = environ.get(name)
            if not path:
                return None
            try:
                with open(path, "rb") as fh:
                    return fh.read()
            except OSError as exc:
                raise KgweError(f"cannot read {name}={path}: {exc.strerror}") from exc

        try:
            hosts = parse_hosts(environ.get("KGWE_GIT_HOSTS", ""))
        except ValueError as exc:
            raise KgweError(f"KGWE_GIT_HOSTS: {exc}") from None
        return cls(
            username=environ.get("KGWE_GIT_USERNAME") or None,
            password=environ.get("KGWE_GIT_TOKEN") or None,
            ssh_identity=read("KGWE_GIT_SSH_KEY_FILE"),
            ssh_known_hosts=read("KGWE_GIT_KNOWN_HOSTS_FILE"),
            hosts=hosts,
        )


def http_header(creds: GitCredentials) -> str | None:
    """The Authorization header `creds` send over HTTPS (None: nothing to send)."""
    if creds.bearer_token:
        return f"Authorization: Bearer {creds.bearer_token}"
    if creds.password:
        user = creds.username or "git"
        pair = base64.b64encode(f"{user}:{creds.password}".encode()).decode()
        return f"Authorization: Basic {pair}"
    return None


def is_ssh_url(url: str | None) -> bool:
    """ssh://... or scp-like user@host:path (what git itself treats as SSH)."""
    if not url:
        return False
    return url.startswith("ssh://") or ("://" not in url and "@" in url.split(":", 1)[0])


@contextmanager
def git_environment(
    creds: GitCredentials | None,
    *,
    connect_timeout_seconds: int = 30,
    url: str | None = None,
    allowed_networks: tuple[Network, ...] = (),
) -> Iterator[dict[str, str]]:
    """Environment variables for one git invocation; key files exist only inside the `with` block.

    With `url` (a network git call), its target is checked (UnsafeGitTarget) and `creds` must be bound to
    its host (CredentialsNotBound) before anything runs. SSH never trusts a host on first use:
    StrictHostKeyChecking=yes, with the Secret's known_hosts when it has one (the controller requires it
    for SSH URLs; see kgwe.reconcile.repository_git)."""
    env: dict[str, str] = {
        "GIT_TERMINAL_PROMPT": "0",  # never hang on a password prompt
        "GIT_ASKPASS": "true",
        "SSH_ASKPASS": "true",
        "GIT_CONFIG_NOSYSTEM": "1",
        # Abort transfers slower than 1 KiB/s for the timeout (a stuck server must not hang a reconcile).
        "GIT_HTTP_LOW_SPEED_LIMIT": "1024",
        "GIT_HTTP_LOW_SPEED_TIME": str(connect_timeout_seconds),
    }
    config = [("http.followRedirects", "false")]
    origin = url_origin(url) if url else None
    if origin is not None:
        addresses = check_target(origin, allowed_networks, timeout_seconds=connect_timeout_seconds)
        if origin.scheme != "ssh":
            config.append(("http.curloptResolve", resolve_pin(origin, addresses)))
    if url is not None and creds is not None:
        creds.check_bound(origin)
    header = http_header(creds) if creds is not None and origin is not None else None
    if header and origin is not None:
        config.append((f"http.{origin.prefix}.extraHeader", header))
    env["GIT_CONFIG_COUNT"] = str(len(config))
    for i, (key, value) in enumerate(config):
        env[f"GIT_CONFIG_KEY_{i}"], env[f"GIT_CONFIG_VALUE_{i}"] = key, value
    tmpdir = None
    try:
        identity = creds.ssh_identity if creds is not None else None
        known_hosts = creds.ssh_known_hosts if creds is not None else None
        if identity or known_hosts or is_ssh_url(url):
            opts = [
                "-o",
                "BatchMode=yes",
                "-o",
                f"ConnectTimeout={connect_timeout_seconds}",
                "-o",
                "StrictHostKeyChecking=yes",
            ]
            tmpdir = tempfile.mkdtemp(prefix="kgwe-ssh-")
            if identity:
                key_path = os.path.join(tmpdir, "identity")
                fd = os.open(key_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
                with os.fdopen(fd, "wb") as fh:
                    fh.write(identity if identity.endswith(b"\n") else identity + b"\n")
                opts += ["-i", key_path, "-o", "IdentitiesOnly=yes"]
            if known_hosts:
                hosts_path = os.path.join(tmpdir, "known_hosts")
                with open(hosts_path, "wb") as fh:
                    fh.write(known_hosts)
                opts += ["-o", f"UserKnownHostsFile={hosts_path}", "-o", "GlobalKnownHostsFile=/dev/null"]
            env["GIT_SSH_COMMAND"] = "ssh " + " ".join(shlex.quote(o) for o in opts)
            env["GIT_SSH_VARIANT"] = "ssh"
        yield env
    finally:
        if tmpdir:
            shutil.rmtree(tmpdir, ignore_errors=True)
