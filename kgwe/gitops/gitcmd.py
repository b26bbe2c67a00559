"""Running git on behalf of a PolicyRepository, which may be hostile: what URLs it may name, which
transports git may use, and a hard deadline on every git process.

- URLs: https://, ssh:// and scp-like user@host:path only (the rule of the PolicyRepository model, checked
  again here before every git call). Local paths, file:// and plain http:// only with `allow_local`, an
  allowance of whoever runs KGWE (tests, `kgwe demo`, `kgwe report` on one's own repositories) that no
  PolicyRepository can turn on.
- Transports: GIT_ALLOW_PROTOCOL limits git itself (also for submodules and redirects) to https and ssh
  (plus file and http with `allow_local`); `ext::` is never allowed. URL and ref arguments go after `--`.
- Targets: the URL's host is resolved before git runs and refused when any address is loopback,
  link-local (169.254/16: cloud metadata; fe80::/10), unspecified, multicast or reserved, unless the operator
  allows that network (`allowed_networks`); https connects to exactly the addresses checked (curl's resolve
  pin), and git never follows a redirect, so neither DNS nor the server can move it elsewhere afterwards.
- Errors: what git says about a server never reaches status or Events as such (it would tell a repository
  author which internal hosts and ports answer): `git_failure` classifies it into a few fixed messages.
- Deadline: the git process and its helpers (git-remote-https, ssh) run in their own process group, killed
  as a whole when the deadline passes, so a server that trickles bytes cannot hold a worker forever.
"""

from __future__ import annotations

import ipaddress
import os
import re
import signal
import socket
import subprocess
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import git

from kgwe.errors import KgweError
from kgwe.policy.types import parse_git_url

# Variables that would make git print request headers (the credentials) into its output.
_TRACE_VARIABLES = ("GIT_TRACE", "GIT_TRACE_CURL", "GIT_TRACE_PACKET", "GIT_CURL_VERBOSE", "GIT_TRACE2")


Network = ipaddress.IPv4Network | ipaddress.IPv6Network
LOOPBACK_NETWORKS: tuple[Network, ...] = tuple(map(ipaddress.ip_network, ("127.0.0.0/8", "::1/128")))
DEFAULT_PORTS = {"https": 443, "ssh": 22, "http": 80}
ALLOW_NETWORKS_ENV = "KGWE_ALLOW_GIT_NETWORKS"


def operator_networks(environ: Mapping[str, str] = os.environ) -> tuple[Network, ...]:
    """The special networks the operator allows through the environment (comma-separated CIDRs), the
    default of --allow-git-network; KgweError naming a bad entry."""
    try:
        return tuple(
            ipaddress.ip_network(part.strip(), strict=False)
            for part in environ.get(ALLOW_NETWORKS_ENV, "").split(",")
            if part.strip()
        )
    except ValueError as exc:
        raise KgweError(f"{ALLOW_NETWORKS_ENV}: {exc}") from None


@dataclass(frozen=True)
class GitAccess:
    """What whoever runs the controller allows its git processes. No PolicyRepository can change it."""

    allow_local_urls: bool = False  # local paths, file://, http://, loopback (tests and `kgwe demo` only)
    credentials_from_env: bool = False  # KGWE_GIT_TOKEN etc. for repositories without a secretRef
    ca_file: str | None = None  # extra CA bundle for https remotes (a private Git server's CA)
    # special networks (loopback, link-local, ...) git may reach all the same (--allow-git-network)
    allowed_networks: tuple[Network, ...] = field(default_factory=operator_networks)


class UnsafeGitArgument(KgweError):
    """A URL, ref or path git must not be given (it could run commands or read other repositories)."""


def check_url(url: str, *, allow_local: bool = False) -> str:
    """The URL to hand to git (local paths made absolute with `allow_local`); UnsafeGitArgument otherwise."""
    try:
        return parse_git_url(url)
    except ValueError as exc:
        refused = str(exc)
    if allow_local and isinstance(url, str) and url and not url.startswith("-") and "::" not in url:
        if re.match(r"^(https?|file)://[^/@\s]*(/\S*)?$", url):  # no user-info: no password in a URL
            return url
        if ":" not in url and not re.search(r"\s", url):  # a path (scp-like host:path is not one)
            return str(Path(url).expanduser().resolve())
    raise UnsafeGitArgument(refused)


class UnsafeGitTarget(UnsafeGitArgument):
    """The URL's host cannot be resolved, or resolves to an address git must not reach."""


@dataclass(frozen=True)
class Origin:
    """Where a network URL connects: scheme, host (lowercase) and port."""

    scheme: str
    host: str
    port: int

    @property
    def name(self) -> str:
        """How a credentials Secret names it: `host`, or `host:port` for a port other than the default."""
        return self.host if DEFAULT_PORTS.get(self.scheme) == self.port else f"{self.host}:{self.port}"

    @property
    def prefix(self) -> str:
        """The URL prefix git's `http.<url>.*` settings match for this origin."""
        default = DEFAULT_PORTS.get(self.scheme) == self.port
        return f"{self.scheme}://{self.host}{'' if default else f':{self.port}'}/"


_NETWORK_URL = re.compile(r"^(https|ssh|http)://(?:[^/@]*@)?([^/:@]+)(?::([0-9]{1,5}))?(?:/|$)")
_SCP_URL = re.compile(r"^[^/:@]+@([^/:@]+):")


def url_origin(url: str) -> Origin | None:
    """The origin of a network URL (https, ssh, scp-like, or http where allowed); None for local ones."""
    found = _NETWORK_URL.match(url)
    if found:
        scheme, host, port = found.group(1), found.group(2).lower(), found.group(3)
        return Origin(scheme, host, int(port) if port else DEFAULT_PORTS[scheme])
    found = _SCP_URL.match(url) if "://" not in url else None
    return Origin("ssh", found.group(1).lower(), 22) if found else None


def _special(ip: ipaddress.IPv4Address | ipaddress.IPv6Address) -> str | None:
    """What makes an address one git must not reach by default (None: an ordinary address)."""
    if isinstance(ip, ipaddress.IPv6Address):
        embedded = ip.ipv4_mapped or ip.sixtofour or (ip.teredo[1] if ip.teredo else None)
        if embedded is not None:
            return _special(embedded)
    for kind in ("loopback", "link_local", "unspecified", "multicast", "reserved"):
        if getattr(ip, f"is_{kind}"):
            return kind.replace("_", "-")
    return None


Resolver = Callable[..., list[tuple[Any, ...]]]


def _resolve_within(
    resolve: Resolver, origin: Origin, timeout_seconds: float | None
) -> list[tuple[Any, ...]]:
    """`resolve(origin)`, given at most `timeout_seconds`: the C resolver cannot be interrupted, so a slow
    DNS server would hold the caller past its deadline; the lookup runs in a daemon thread that is left to
    finish on its own (libc's own retry limits end it) while the caller gets UnsafeGitTarget."""
    if timeout_seconds is None:
        return resolve(origin.host, origin.port, type=socket.SOCK_STREAM)
    answer: list[list[tuple[Any, ...]] | BaseException] = []
    done = threading.Event()

    def lookup() -> None:
        try:
            answer.append(resolve(origin.host, origin.port, type=socket.SOCK_STREAM))
        except BaseException as exc:  # handed to the caller, which decides
            answer.append(exc)
        done.set()

    threading.Thread(target=lookup, name=f"resolve-{origin.host}", daemon=True).start()
    if not done.wait(max(timeout_seconds, 0.0)):
        raise UnsafeGitTarget(f"cannot resolve host {origin.host!r} within {timeout_seconds:g}s")
    if isinstance(answer[0], BaseException):
        raise answer[0]
    return answer[0]


def check_target(
    origin: Origin,
    allowed_networks: tuple[Network, ...] = (),
    *,
    resolve: Resolver = socket.getaddrinfo,
    timeout_seconds: float | None = None,
) -> list[str]:
    """The addresses `origin` resolves to (within `timeout_seconds`, part of the caller's deadline), all of
    them ordinary or in `allowed_networks`; UnsafeGitTarget otherwise (naming the kind of address, never the
    address)."""
    try:
        infos = _resolve_within(resolve, origin, timeout_seconds)
    except (OSError, UnicodeError):
        raise UnsafeGitTarget(f"cannot resolve host {origin.host!r}") from None
    addresses = sorted({str(info[4][0]).split("%", 1)[0] for info in infos})
    for text in addresses:
        ip = ipaddress.ip_address(text)
        kind = _special(ip)
        if kind is not None and not any(ip in network for network in allowed_networks):
            raise UnsafeGitTarget(
                f"host {origin.host!r} resolves to a {kind} address, which git may not reach unless the "
                "controller's operator allows that network (--allow-git-network)"
            )
    if not addresses:
        raise UnsafeGitTarget(f"cannot resolve host {origin.host!r}")
    return addresses


def resolve_pin(origin: Origin, addresses: list[str]) -> str:
    """An `http.curloptResolve` entry: curl connects to exactly these addresses for the origin."""
    shown = ",".join(f"[{a}]" if ":" in a else a for a in addresses)
    return f"{origin.host}:{origin.port}:{shown}"


# What git's error text says, by class: the status shows the class, never the text (see the module doc).
_FAILURES = (
    (("could not resolve host", "could not resolve hostname", "name or service not known"), "host not found"),
    (
        ("failed to connect", "connection refused", "connection timed out", "no route to host",
         "connection reset", "ssl", "tls", "certificate", "gnutls", "empty reply", "recv failure",
         "connection closed", "network is unreachable", "operation timed out"),
        "cannot reach the Git server (no connection, or TLS failed)",
    ),
    (("host key verification failed",), "the SSH host key is not the one in known_hosts"),
    (("redirect", "returned error: 30"), "the server answered with a redirect, which is never followed"),
    (
        ("authentication failed", "could not read username", "could not read password", "permission denied",
         "http 401", "error: 401", "http 403", "error: 403"),
        "authentication failed",
    ),
)  # fmt: skip


def git_failure(exc: git.GitCommandError) -> str:
    """A short fixed message for a failed network git command: its class, never git's own words."""
    if exc.status is None:  # run_git's own words for its deadline ("git timed out after 60s ...")
        return str(exc.stderr or "git timed out").strip()
    text = str(exc.stderr or "").lower()
    for needles, message in _FAILURES:
        if any(needle in text for needle in needles):
            return message
    return f"no Git repository at this URL, or the server refused it (git exited with status {exc.status})"


def check_argument(value: str, what: str) -> str:
    """A ref, branch or path argument: never empty, never read by git as an option."""
    if not value or value.startswith("-") or "\0" in value or "\n" in value:
        raise UnsafeGitArgument(f"{what} {value!r} is not allowed (empty, or starts with '-')")
    return value


def display_url(url: str) -> str:
    """The URL without any user-info, safe for status and logs."""
    return re.sub(r"//[^/@]+@", "//", url)


def git_process_environment(
    extra: dict[str, str], *, allow_local: bool, ca_file: str | None = None
) -> dict[str, str]:
    """The environment of one git process: ours minus tracing, plus `extra`, plus the transport allowlist."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(_TRACE_VARIABLES)}
    env.update(extra)
    if ca_file:
        env["GIT_SSL_CAINFO"] = ca_file
    env["GIT_ALLOW_PROTOCOL"] = "https:ssh:http:file" if allow_local else "https:ssh"
    env.setdefault("GIT_TERMINAL_PROMPT", "0")
    env.setdefault("GIT_CONFIG_NOSYSTEM", "1")
    return env


def run_git(
    args: list[str],
    *,
    cwd: Path | None = None,
    env: dict[str, str] | None = None,
    timeout_seconds: float | None = None,
    allow_local: bool = False,
    stdout: IO[bytes] | None = None,
    input: bytes | None = None,
    ca_file: str | None = None,
) -> str:
    """Run `git *args`; its stdout (trailing newline removed), or git.GitCommandError (status None on the
    deadline). With `stdout`, output goes to that file instead."""
    command = ["git", *args]
    process = subprocess.Popen(
        command,
        cwd=cwd,
        env=git_process_environment(env or {}, allow_local=allow_local, ca_file=ca_file),
        stdin=subprocess.PIPE if input is not None else subprocess.DEVNULL,
        stdout=stdout if stdout is not None else subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,  # its own process group: the deadline kills helpers too
    )
    try:
        out, err = process.communicate(input=input, timeout=timeout_seconds)
    except subprocess.TimeoutExpired:
        _kill_group(process)
        process.communicate()
        raise git.GitCommandError(
            command, None, f"git timed out after {timeout_seconds:g}s and was killed".encode()
        ) from None
    except BaseException:
        _kill_group(process)
        process.communicate()
        raise
    text_out = (out or b"").decode("utf-8", "replace")
    text_err = (err or b"").decode("utf-8", "replace")
    if process.returncode != 0:
        raise git.GitCommandError(command, process.returncode, text_err, text_out)
    return text_out.removesuffix("\n")


def _kill_group(process: subprocess.Popen[Any]) -> None:
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        process.kill()


__all__ = [
    "LOOPBACK_NETWORKS",
    "GitAccess",
    "Origin",
    "UnsafeGitArgument",
    "UnsafeGitTarget",
    "check_argument",
    "check_target",
    "check_url",
    "display_url",
    "git_failure",
    "git_process_environment",
    "operator_networks",
    "resolve_pin",
    "run_git",
    "url_origin",
]
