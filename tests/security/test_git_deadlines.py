"""A Git server that trickles bytes forever, or accepts and never answers, cannot hold a fetch past its
deadline, over https as over http: the git process (and its transport helper) is killed. (The in-process
ref poll's deadlines over TLS: test_git_poll_tls.py.)"""

from __future__ import annotations

import socket
import ssl
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from kgwe.gitops.source import GitRef, GitSource, GitSourceError
from kgwe.localcluster.pki import write_pki


class Trickler:
    """Answers git's ref advertisement request with an endless, valid-looking advertisement at ~3 KiB/s:
    fast enough for git's low-speed limit (1 KiB/s), never finished."""

    def __init__(self, context: ssl.SSLContext | None = None) -> None:
        self.context = context
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.stop = threading.Event()
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        self.sock.settimeout(0.2)
        while not self.stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except OSError:
                continue
            threading.Thread(target=self._trickle, args=(conn,), daemon=True).start()

    def _trickle(self, raw: socket.socket) -> None:
        with raw:
            try:
                conn = self.context.wrap_socket(raw, server_side=True) if self.context else raw
                conn.recv(65536)
                conn.sendall(
                    b"HTTP/1.1 200 OK\r\nContent-Type: application/x-git-upload-pack-advertisement\r\n"
                    b"Cache-Control: no-cache\r\nTransfer-Encoding: chunked\r\n\r\n"
                )
                head = b"001e# service=git-upload-pack\n0000"
                conn.sendall(b"%x\r\n%s\r\n" % (len(head), head))
                n = 0
                while not self.stop.is_set():
                    line = b"%040x refs/heads/b%08d\n" % (n, n)
                    pkt = b"%04x%s" % (len(line) + 4, line)
                    conn.sendall(b"%x\r\n%s\r\n" % (len(pkt), pkt))
                    n += 1
                    time.sleep(0.02)
            except OSError:
                return

    def close(self) -> None:
        self.stop.set()
        self.sock.close()


@pytest.fixture(params=["https", "http"])
def trickler(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[str, Trickler, str | None]]:
    context, ca_file = None, None
    if request.param == "https":
        pki = write_pki(tmp_path / "pki")
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(pki.serving_cert, pki.serving_key)
        ca_file = str(pki.ca_cert)
    server = Trickler(context)
    yield request.param, server, ca_file
    server.close()


def test_a_trickling_server_is_cut_off_at_the_deadline(trickler, tmp_path: Path) -> None:
    scheme, server, ca_file = trickler
    src = GitSource(
        f"{scheme}://127.0.0.1:{server.port}/policy.git",
        GitRef(branch="main"),
        cache_dir=tmp_path / "c",
        timeout_seconds=1,
        attempts=2,
        sleep=lambda s: None,
        allow_local=scheme == "http",  # plain http on loopback needs the operator's allowance
        ca_file=ca_file,
    )
    started = time.monotonic()
    with pytest.raises(GitSourceError, match="timed out after 1s"):
        src.fetch()
    elapsed = time.monotonic() - started
    assert elapsed < 60, elapsed  # two attempts of 1 s each, plus a busy machine's slack
    assert processes_naming(f"127.0.0.1:{server.port}") == []  # the transport helper died too


def processes_naming(text: str) -> list[str]:
    found = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            args = cmdline.read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if text in args:
            found.append(args)
    return found
