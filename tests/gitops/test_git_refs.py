"""The remote's refs asked in-process over smart HTTP (kgwe.gitops.refs): the same answer as `git ls-remote`
from a real Git server, every rule of a git call kept, and git asked whenever the answer could differ."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from kgwe.gitops.auth import CredentialsNotBound, GitCredentials
from kgwe.gitops.gitcmd import LOOPBACK_NETWORKS, UnsafeGitTarget
from kgwe.gitops.refs import ADVERTISEMENT_TYPE, MAX_ADVERTISEMENT_BYTES, advertised_ref
from kgwe.gitops.source import GitRef, GitSource
from kgwe.localcluster.gitserver import GitHttpsServer
from tests.gitops.conftest import git

TOKEN = "ghp_refs_token"


def ask(
    url: str,
    name: str,
    ca_file: str | None,
    credentials: GitCredentials | None = None,
    timeout_seconds: float = 10,
) -> str | None:
    return advertised_ref(
        url,
        name,
        credentials=credentials,
        ca_file=ca_file,
        allowed_networks=LOOPBACK_NETWORKS,
        timeout_seconds=timeout_seconds,
    )


def mirror(server: GitHttpsServer, ref: GitRef, tmp_path) -> GitSource:
    return GitSource(
        server.url("remote.git"),
        ref,
        cache_dir=tmp_path / "c",
        ca_file=server.ca_file,
        allowed_networks=LOOPBACK_NETWORKS,
    )


def test_the_answer_is_what_git_ls_remote_says(remote):
    git(remote.work, "tag", "-a", "v1", "-m", "release")
    git(remote.work, "push", "origin", "v1")
    with GitHttpsServer(remote.bare.parent) as server:
        url = server.url("remote.git")
        listed = dict(
            line.split("\t")[::-1] for line in git(remote.bare, "ls-remote", str(remote.bare)).splitlines()
        )
        assert ask(url, "refs/heads/main", server.ca_file) == listed["refs/heads/main"]
        assert ask(url, "refs/tags/v1", server.ca_file) == listed["refs/tags/v1"]  # the tag object, as git
        assert listed["refs/tags/v1"] != listed["refs/tags/v1^{}"]
        assert ask(url, "refs/heads/absent", server.ca_file) == ""


def test_a_poll_of_an_unchanged_repository_is_up_to_date_and_a_push_is_seen(remote, tmp_path):
    with GitHttpsServer(remote.bare.parent) as server:
        source = mirror(server, GitRef(branch="main"), tmp_path)
        first = source.fetch()
        assert source._up_to_date()
        pushed = remote.commit({"policy/mig.yaml": "kind: MIGStrategy\n# changed\n"})
        assert not source._up_to_date()
        assert source.fetch().sha == pushed != first.sha


def test_a_moved_tag_resolves_to_its_new_commit(remote, tmp_path):
    git(remote.work, "tag", "-a", "v1", "-m", "release")
    git(remote.work, "push", "origin", "v1")
    with GitHttpsServer(remote.bare.parent) as server:
        source = mirror(server, GitRef(tag="v1"), tmp_path)
        first = source.fetch()
        assert source.fetch() == first  # unchanged: up to date, the commit the tag named before
        moved = remote.commit({"README.md": "moved\n"})
        git(remote.work, "tag", "-f", "-a", "v1", "-m", "release again")
        git(remote.work, "push", "-f", "origin", "v1")
        assert not source._up_to_date()
        assert source.fetch().sha == moved != first.sha


def test_credentials_go_only_to_the_host_they_are_bound_to(remote):
    with GitHttpsServer(remote.bare.parent, username="x-access-token", password=TOKEN) as server:
        url = server.url("remote.git")
        bound = GitCredentials(username="x-access-token", password=TOKEN, hosts=(f"127.0.0.1:{server.port}",))
        assert ask(url, "refs/heads/main", server.ca_file, bound) == remote.log()[0].split()[0]
        assert server.authorizations[-1].startswith("Basic ")

        seen = len(server.authorizations)
        elsewhere = GitCredentials(username="x-access-token", password=TOKEN, hosts=("git.example.com",))
        with pytest.raises(CredentialsNotBound):
            ask(url, "refs/heads/main", server.ca_file, elsewhere)
        assert len(server.authorizations) == seen  # nothing was sent

        assert ask(url, "refs/heads/main", server.ca_file) is None  # 401 without them: git says why


def test_a_loopback_target_is_refused_unless_its_network_is_allowed(remote):
    with GitHttpsServer(remote.bare.parent) as server, pytest.raises(UnsafeGitTarget):
        advertised_ref(
            server.url("remote.git"),
            "refs/heads/main",
            credentials=None,
            ca_file=server.ca_file,
            allowed_networks=(),
            timeout_seconds=10,
        )


def test_a_server_certificate_the_ca_does_not_vouch_for_gets_no_answer(remote, monkeypatch):
    monkeypatch.delenv("GIT_SSL_CAINFO", raising=False)
    with GitHttpsServer(remote.bare.parent) as server:
        assert ask(server.url("remote.git"), "refs/heads/main", None) is None


@pytest.mark.parametrize("variable", ["HTTPS_PROXY", "https_proxy", "GIT_SSL_NO_VERIFY", "GIT_SSL_CAPATH"])
def test_git_is_asked_when_its_environment_would_connect_differently(remote, monkeypatch, variable):
    monkeypatch.setenv(variable, "http://127.0.0.1:9" if "PROXY" in variable.upper() else "1")
    with GitHttpsServer(remote.bare.parent) as server:
        assert ask(server.url("remote.git"), "refs/heads/main", server.ca_file) is None


def test_git_is_asked_when_its_global_config_has_http_settings(remote, monkeypatch, tmp_path):
    (tmp_path / ".gitconfig").write_text("[http]\n\tsslCAInfo = /etc/ssl/pinned.pem\n")
    monkeypatch.setenv("HOME", str(tmp_path))
    with GitHttpsServer(remote.bare.parent) as server:
        assert ask(server.url("remote.git"), "refs/heads/main", server.ca_file) is None


SHA = "a" * 40


def pkt(text: bytes) -> bytes:
    return b"%04x" % (len(text) + 4) + text


MAIN = pkt(SHA.encode() + b" refs/heads/main\0caps\n")
GOOD = pkt(b"# service=git-upload-pack\n") + b"0000" + MAIN + b"0000"


@pytest.fixture
def answers() -> Iterator[tuple[str, dict]]:
    """A plain-HTTP server on loopback answering whatever the test sets (status, headers, body)."""
    answer: dict = {}

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: object) -> None:
            return

        def do_GET(self) -> None:
            self.send_response(answer["status"])
            for key, value in answer["headers"].items():
                self.send_header(key, value)
            self.send_header("Content-Length", str(len(answer["body"])))
            self.end_headers()
            self.wfile.write(answer["body"])

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}/repo.git", answer
    finally:
        httpd.shutdown()
        httpd.server_close()


def test_a_smart_answer_is_read(answers):
    url, answer = answers
    answer.update(status=200, headers={"Content-Type": ADVERTISEMENT_TYPE}, body=GOOD)
    assert ask(url, "refs/heads/main", None) == SHA


@pytest.mark.parametrize(
    ("status", "headers", "body"),
    [
        (302, {"Location": "https://elsewhere.example/repo.git/info/refs"}, b""),  # never followed
        (200, {"Content-Type": "text/plain"}, SHA.encode() + b"\trefs/heads/main\n"),  # a dumb server
        (200, {"Content-Type": ADVERTISEMENT_TYPE}, GOOD[:-9]),  # cut short
        (200, {"Content-Type": ADVERTISEMENT_TYPE}, b"zzzz" + GOOD),  # not pkt-lines
        (200, {"Content-Type": ADVERTISEMENT_TYPE}, GOOD.replace(SHA.encode(), b"g" * 40)),  # not an id
        (200, {"Content-Type": ADVERTISEMENT_TYPE}, GOOD + b"0" * MAX_ADVERTISEMENT_BYTES),  # over the bound
    ],
)
def test_anything_else_is_left_to_git(answers, status, headers, body):
    url, answer = answers
    answer.update(status=status, headers=headers, body=body)
    assert ask(url, "refs/heads/main", None) is None


def test_a_server_trickling_its_headers_is_cut_off_at_the_deadline():
    """Each byte of the status line and headers comes within any per-read timeout; the whole request's
    deadline still ends it (then git, with its own deadline, is asked)."""
    listener = socket.create_server(("127.0.0.1", 0))
    stop, cut_off = threading.Event(), threading.Event()

    def trickle() -> None:  # 200 bytes, one per 0.05 s: 10 s in all, twenty times the deadline
        conn, _ = listener.accept()
        with conn:
            conn.recv(65536)
            for byte in b"HTTP/1.1 200 OK\r\nX-Slow: " + b"a" * 183:
                if stop.wait(0.05):
                    return
                try:
                    conn.sendall(bytes([byte]))
                except OSError:
                    cut_off.set()  # the client went away mid-headers
                    return

    thread = threading.Thread(target=trickle, daemon=True)
    thread.start()
    url = f"http://127.0.0.1:{listener.getsockname()[1]}/repo.git"
    try:
        assert ask(url, "refs/heads/main", None, timeout_seconds=0.5) is None
        thread.join(timeout=15)
    finally:
        stop.set()
        listener.close()
    assert cut_off.is_set()  # ended by the client before the server had sent its headers
