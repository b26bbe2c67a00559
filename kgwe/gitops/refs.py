"""Where a remote branch or tag points, asked in-process over Git's smart HTTP (`GET <url>/info/refs?
service=git-upload-pack`, the request `git ls-remote` starts with) instead of by a git process: a poll of an
unchanged repository costs one HTTPS request, not two processes and their TLS set-up.

It keeps every rule a git call keeps (kgwe.gitops.gitcmd, kgwe.gitops.auth): the URL checked; the host
resolved and refused when special unless its network is allowed, and the connection made to exactly the
addresses checked; credentials only to the host they are bound to, as the same Authorization header; the
server certificate verified for the host against the CA git would use (`ca_file`, else $GIT_SSL_CAINFO, else
the system's); no redirect followed; a deadline on the whole request, https as http (the handshake, interim
replies, headers and body alike), and at most MAX_INTERIM_REPLIES interim replies; the answer bounded, its
pkt-lines read as strictly as git reads them. Where it could
answer differently from git — SSH, user-info in the URL, a proxy or TLS settings in git's environment or
global config, a dumb or unexpected server, an answer over the bound, no connection — it returns None and
the caller asks git, whose errors say what went wrong.
"""

from __future__ import annotations

import contextlib
import http.client
import os
import socket
import ssl
import threading
import time
from pathlib import Path

from kgwe.gitops.auth import GitCredentials, http_header
from kgwe.gitops.gitcmd import Network, Origin, check_target, url_origin

MAX_ADVERTISEMENT_BYTES = 1 << 20  # larger ref lists are left to git
MAX_INTERIM_REPLIES = 8  # `100 Continue` replies read before the answer (a GET expects none)
ADVERTISEMENT_TYPE = "application/x-git-upload-pack-advertisement"
_SERVICE_LINE = b"# service=git-upload-pack\n"
LARGE_PACKET_MAX = 65520  # the longest pkt-line, its four length digits included (git's protocol)
_HEX_DIGITS = frozenset(b"0123456789abcdefABCDEF")
# what makes git connect or verify differently from this module (then git is asked)
_GIT_NETWORK_VARIABLES = (
    "http_proxy",
    "https_proxy",
    "all_proxy",
    "HTTP_PROXY",
    "HTTPS_PROXY",
    "ALL_PROXY",
    "GIT_PROXY_COMMAND",
    "GIT_SSL_NO_VERIFY",
    "GIT_SSL_CAPATH",
    "GIT_SSL_CERT",
    "GIT_SSL_KEY",
    "GIT_SSL_VERSION",
    "GIT_SSL_CIPHER_LIST",
    "GIT_CONFIG_GLOBAL",
    "GIT_CONFIG_PARAMETERS",
)


def git_settings_apply() -> bool:
    """Whether git's environment or its global config could change how git reaches a server (a proxy, TLS
    settings, any [http] section): then only git may answer."""
    if any(os.environ.get(name) for name in _GIT_NETWORK_VARIABLES):
        return True
    home = os.environ.get("HOME", "")
    xdg = os.environ.get("XDG_CONFIG_HOME") or (f"{home}/.config" if home else "")
    for path in (f"{home}/.gitconfig" if home else "", f"{xdg}/git/config" if xdg else ""):
        try:
            text = Path(path).read_text(errors="replace").lower() if path else ""
        except OSError:
            continue
        if "[http" in text or "proxy" in text or "ssl" in text or "[include" in text:
            return True
    return False


def advertised_ref(
    url: str,
    name: str,
    *,
    credentials: GitCredentials | None,
    ca_file: str | None,
    allowed_networks: tuple[Network, ...],
    timeout_seconds: float,
) -> str | None:
    """The commit (or tag object) `name` (refs/heads/X, refs/tags/X) points at on the remote at `url` (a
    URL kgwe.gitops.gitcmd.check_url returned); "" when the remote has no such ref; None when only git may
    say. UnsafeGitTarget / CredentialsNotBound as for a git call."""
    origin = url_origin(url)
    if origin is None or origin.scheme == "ssh" or "@" in url.split("://", 1)[-1].split("/", 1)[0]:
        return None
    path = url.split("://", 1)[1].partition("/")[2]
    if not path or "?" in path or "#" in path or git_settings_apply():
        return None
    deadline = time.monotonic() + timeout_seconds  # resolving the host is part of the deadline
    addresses = check_target(origin, allowed_networks, timeout_seconds=timeout_seconds)
    if credentials is not None:
        credentials.check_bound(origin)
    header = http_header(credentials) if credentials is not None else None
    left = deadline - time.monotonic()
    body = _request(origin, addresses, f"/{path.rstrip('/')}/info/refs", header, ca_file, left)
    return None if body is None else _find(body, name)


class _CountedResponse(http.client.HTTPResponse):
    """A response that reads at most MAX_INTERIM_REPLIES interim replies (`100 Continue`, which
    http.client skips and reads past, as many as the server sends) before its final status line."""

    def _read_status(self) -> tuple[str, int, str]:  # http.client's one hook for each status line read
        self._statuses = getattr(self, "_statuses", 0) + 1
        if self._statuses > MAX_INTERIM_REPLIES + 1:
            raise http.client.HTTPException(f"more than {MAX_INTERIM_REPLIES} interim replies")
        version, status, reason = super()._read_status()  # type: ignore[misc]  # private, in every http.client since 3.0
        return str(version), int(status), str(reason)


class _PinnedConnection(http.client.HTTPConnection):
    """HTTP(S) to one address checked beforehand, the certificate verified for the URL's host."""

    response_class = _CountedResponse

    def __init__(self, origin: Origin, address: str, context: ssl.SSLContext | None, timeout: float):
        super().__init__(origin.host, origin.port, timeout=timeout)
        self._address, self._context = address, context
        self._lock = threading.Lock()
        self._live: socket.socket | None = None  # the socket that owns the connection's descriptor now
        self._cut = False

    def connect(self) -> None:
        sock = socket.create_connection((self._address, self.port), self.timeout)
        self._own(sock)
        if self._context is None:
            self.sock = sock
            return
        # wrapping hands the descriptor to the TLS socket (`sock` is detached): from then on only the TLS
        # socket can shut it down, so it is the one cut() must reach — before the handshake starts
        tls = self._context.wrap_socket(sock, server_hostname=self.host, do_handshake_on_connect=False)
        self._own(tls)
        self.sock = tls
        tls.do_handshake()

    def _own(self, sock: socket.socket) -> None:
        with self._lock:
            self._live = sock
            cut = self._cut
        if cut:  # the deadline passed while it was being made
            sock.close()
            raise TimeoutError("the deadline passed")

    def cut(self) -> None:
        """End the exchange wherever it stands (called from a timer at the deadline): a server that trickles
        its handshake, status line, headers or interim replies a byte at a time stays within every per-read
        timeout, so only a clock over the whole request bounds it. The descriptor is shut down under
        whatever holds it (plain or TLS), so the reading thread sees the end of the stream at once."""
        with self._lock:  # held through the shutdown: close() cannot free the descriptor meanwhile
            self._cut = True
            if self._live is not None:
                with contextlib.suppress(OSError):  # already shut down
                    # the plain socket's shutdown: SSLSocket.shutdown would also drop the TLS state under
                    # the reading thread's feet
                    socket.socket.shutdown(self._live, socket.SHUT_RDWR)

    def limit(self, seconds: float) -> None:
        """The next read's timeout, on whichever socket holds the descriptor (after a `Connection: close`
        answer http.client has let go of it, the response has not)."""
        with self._lock:
            if self._live is not None:
                self._live.settimeout(seconds)

    def disarm(self) -> None:
        """Before the descriptor is closed: a late cut() then finds nothing to shut down (never a
        descriptor already reused elsewhere)."""
        with self._lock:
            self._live, self._cut = None, True


def _request(
    origin: Origin,
    addresses: list[str],
    path: str,
    authorization: str | None,
    ca_file: str | None,
    timeout_seconds: float,
) -> bytes | None:
    """The advertisement's bytes, or None (no connection, not 200, not a smart server, over the bound)."""
    context = None
    if origin.scheme == "https":
        context = ssl.create_default_context(cafile=ca_file or os.environ.get("GIT_SSL_CAINFO") or None)
    headers = {"User-Agent": "git/kgwe", "Accept": "*/*", "Pragma": "no-cache"}
    if authorization:
        key, _, value = authorization.partition(": ")
        headers[key] = value
    deadline = time.monotonic() + timeout_seconds
    for address in addresses:
        left = deadline - time.monotonic()
        if left <= 0:
            return None
        connection = _PinnedConnection(origin, address, context, left)
        watchdog = threading.Timer(left, connection.cut)
        watchdog.daemon = True
        watchdog.start()
        response: http.client.HTTPResponse | None = None
        try:
            connection.request("GET", f"{path}?service=git-upload-pack", headers=headers)
            response = connection.getresponse()
            if response.status != 200 or response.getheader("Content-Type") != ADVERTISEMENT_TYPE:
                return None
            body = b""
            while len(body) <= MAX_ADVERTISEMENT_BYTES:
                left = deadline - time.monotonic()
                if left <= 0:
                    return None
                connection.limit(left)
                chunk = response.read1(65536)
                if not chunk:  # the end, unless the deadline cut it short or the body came short
                    whole = not response.length and time.monotonic() < deadline
                    return body if whole else None
                body += chunk
            return None
        except (OSError, http.client.HTTPException):
            continue  # the next address, as curl tries them
        finally:
            watchdog.cancel()
            connection.disarm()
            if response is not None:
                response.close()  # it may hold the descriptor (a `Connection: close` answer)
            connection.close()
    return None


def _pkt_length(field: bytes) -> int | None:
    """A pkt-line's length as git reads it: exactly four hex digits (int() would also take a sign, spaces,
    underscores or "0x", and read a flush-pkt from a cut "00"), at most LARGE_PACKET_MAX; None otherwise."""
    if len(field) != 4 or not _HEX_DIGITS.issuperset(field):
        return None
    size = int(field, 16)
    return size if size <= LARGE_PACKET_MAX else None


def _find(body: bytes, name: str) -> str | None:
    """The object id advertised for `name` ("" when absent); None when the answer is not a v0 ref
    advertisement of git-upload-pack."""
    wanted = name.encode()
    lines: list[bytes | None] = []  # None: a flush-pkt
    at = 0
    while at < len(body):
        size = _pkt_length(body[at : at + 4])
        if size == 0:
            lines.append(None)  # flush
            at += 4
            continue
        if size is None or size < 4 or at + size > len(body):
            return None
        lines.append(body[at + 4 : at + size])
        at += size
    if len(lines) < 2 or lines[0] != _SERVICE_LINE or lines[1] is not None or lines[-1] is not None:
        return None
    for line in lines[2:-1]:
        if line is None:
            return None
        sha, _, rest = line.rstrip(b"\n").partition(b" ")
        ref = rest.split(b"\0", 1)[0]
        if len(sha) not in (40, 64) or any(c not in b"0123456789abcdef" for c in sha):
            return None
        if ref == wanted:
            return sha.decode()
    return ""
