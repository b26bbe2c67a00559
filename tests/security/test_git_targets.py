"""Where git may go on behalf of a PolicyRepository: credentials only to the hosts their Secret names, never
through a redirect, never to loopback, link-local or other special addresses unless the operator allows
that network, and never git's own words about a server in what a repository author can read.

Real git against real servers on loopback (kgwe.localcluster.gitserver, and a plain socket that is not a Git
server); the controller-level tests are in test_git_controller.py."""

from __future__ import annotations

import ipaddress
import socket
import subprocess
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from kgwe.gitops.auth import CredentialsNotBound, GitCredentials
from kgwe.gitops.commit_back import CommitBack
from kgwe.gitops.gitcmd import LOOPBACK_NETWORKS, Origin, UnsafeGitTarget, check_target
from kgwe.gitops.source import GitRef, GitSource, GitSourceError
from kgwe.localcluster.gitserver import GitHttpsServer
from tests.security.conftest import Repo, sh_git

TOKEN = "ghp_" + "t0ken" * 8
FIXED_MESSAGES = (
    "host not found",
    "cannot reach the Git server (no connection, or TLS failed)",
    "authentication failed",
    "the server answered with a redirect, which is never followed",
)


@pytest.fixture
def served(policy_repo: Repo, tmp_path: Path) -> Iterator[GitHttpsServer]:
    policy_repo.push({"policy/a.yaml": "a: 1\n"})
    with GitHttpsServer(policy_repo.bare.parent, username="bot", password=TOKEN) as server:
        yield server


def host_of(server: GitHttpsServer) -> str:
    return f"127.0.0.1:{server.port}"


def fetch(url: str, tmp_path: Path, **kw) -> str:
    """The revision a GitSource fetches, or the message it fails with."""
    kw.setdefault("allowed_networks", LOOPBACK_NETWORKS)
    source = GitSource(url, GitRef(branch="main"), cache_dir=tmp_path / "c", attempts=1, **kw)
    try:
        return str(source.fetch())
    except GitSourceError as exc:
        return str(exc)


def test_credentials_go_only_to_the_hosts_they_are_bound_to(served, policy_repo, tmp_path: Path) -> None:
    # The attacker's server: another origin (another port), asking for any credentials.
    with GitHttpsServer(policy_repo.bare.parent, username="bot", password="anything") as attacker:
        creds = GitCredentials(username="bot", password=TOKEN, hosts=(host_of(served),))
        url = attacker.url("policy.git")
        with pytest.raises(
            CredentialsNotBound, match=rf"bound to {host_of(served)}, not to {host_of(attacker)}"
        ):
            fetch(url, tmp_path, credentials=creds, ca_file=attacker.ca_file)
        cb = CommitBack(url, "main", workdir=tmp_path / "cb", credentials=creds, ca_file=attacker.ca_file)
        cb.allowed_networks = LOOPBACK_NETWORKS
        refused = cb.commit_files({"reports/x.md": "x"}, summary="x")
        assert refused.status == "rejected" and "not sent" in refused.reason
        assert attacker.authorizations == []  # nothing reached it, least of all the token
        # The same credentials work where they are bound.
        assert "sha1:" in fetch(
            served.url("policy.git"), tmp_path / "ok", credentials=creds, ca_file=served.ca_file
        )
        assert served.authorizations and all(a.startswith("Basic ") for a in served.authorizations if a)


def test_credentials_bound_to_no_host_are_sent_nowhere(served, tmp_path: Path) -> None:
    creds = GitCredentials(username="bot", password=TOKEN)
    with pytest.raises(CredentialsNotBound, match="bound to no host"):
        fetch(served.url("policy.git"), tmp_path, credentials=creds, ca_file=served.ca_file)
    assert served.authorizations == []


class Redirector:
    """A plain HTTP server on loopback that redirects every request to `target` (another origin)."""

    def __init__(self, target: str) -> None:
        seen = self.requests = []

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                return

            def do_GET(self) -> None:
                seen.append(self.headers.get("Authorization", ""))
                self.send_response(301)
                self.send_header("Location", target + self.path.split("/", 2)[-1])
                self.send_header("Content-Length", "0")
                self.end_headers()

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_port}/policy.git"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


def test_a_redirect_is_never_followed(served, tmp_path: Path) -> None:
    redirector = Redirector(served.url(""))
    try:
        creds = GitCredentials(username="bot", password=TOKEN, hosts=(redirector.url.split("/")[2],))
        message = fetch(redirector.url, tmp_path, credentials=creds, allow_local=True, ca_file=served.ca_file)
    finally:
        redirector.close()
    assert redirector.requests, "git never asked the redirecting server"
    assert message.endswith("the server answered with a redirect, which is never followed"), message
    assert served.authorizations == []  # the redirect target never heard from git


def spy_on_git(monkeypatch) -> list[tuple[str, dict[str, str]]]:
    """Each network git command GitSource runs, with the git config its environment carries."""
    import kgwe.gitops.source as source_module

    ran: list[tuple[str, dict[str, str]]] = []
    real = source_module.run_git

    def spy(args: list[str], **kw):
        env = kw.get("env") or {}
        count = int(env.get("GIT_CONFIG_COUNT", "0"))
        ran.append(
            (args[0], {env[f"GIT_CONFIG_KEY_{i}"]: env[f"GIT_CONFIG_VALUE_{i}"] for i in range(count)})
        )
        return real(args, **kw)

    monkeypatch.setattr(source_module, "run_git", spy)
    return ran


@pytest.mark.parametrize("by_git", [False, True], ids=["in-process", "git ls-remote"])
def test_asking_whether_the_ref_moved_obeys_the_fetchs_rules(
    served, tmp_path: Path, monkeypatch, by_git: bool
) -> None:
    """The question of a poll (the mirror already holds the branch) goes where a fetch may go and nowhere
    else: credentials only to their hosts, targets checked and pinned, no redirect followed. It is asked
    in-process (kgwe.gitops.refs), or by `git ls-remote` when git's global config has [http] settings."""
    if by_git:
        (tmp_path / ".gitconfig").write_text("[http]\n\tlowSpeedTime = 60\n")
        monkeypatch.setenv("HOME", str(tmp_path))
    creds = GitCredentials(username="bot", password=TOKEN, hosts=(host_of(served),))
    source = GitSource(
        served.url("policy.git"),
        GitRef(branch="main"),
        cache_dir=tmp_path / "c",
        attempts=1,
        credentials=creds,
        ca_file=served.ca_file,
        allowed_networks=LOOPBACK_NETWORKS,
    )
    first = source.fetch()
    ran = spy_on_git(monkeypatch)
    heard = len(served.authorizations)
    assert source.fetch() == first  # the operator's network allowance holds for the poll too
    asked = served.authorizations[heard:]  # the credentials went to the host they are bound to
    assert asked and all(a.startswith("Basic ") for a in asked)
    if not by_git:
        assert ran == []
        _refusals(source, creds, served, ran)
        return
    assert [command for command, _ in ran] == ["ls-remote"]
    config = ran[0][1]
    assert config["http.followRedirects"] == "false"
    assert config["http.curloptResolve"].startswith(f"127.0.0.1:{served.port}:")
    assert config[f"http.https://{host_of(served)}/.extraHeader"].startswith("Authorization: Basic ")
    _refusals(source, creds, served, ran)


def _refusals(source: GitSource, creds: GitCredentials, served, ran: list) -> None:
    """Unbound credentials and a refused target stop the poll before anything is sent or run."""
    heard, commands = len(served.authorizations), len(ran)
    source.credentials = GitCredentials(username="bot", password=TOKEN, hosts=("git.example.com",))
    with pytest.raises(CredentialsNotBound, match=rf"not to {host_of(served)}"):
        source.fetch()
    source.credentials = creds
    source.allowed_networks = ()
    with pytest.raises(UnsafeGitTarget, match="loopback address"):
        source.fetch()
    assert len(ran) == commands and len(served.authorizations) == heard  # neither refusal ran or sent


def test_asking_whether_the_ref_moved_never_follows_a_redirect(
    served, policy_repo: Repo, tmp_path: Path, monkeypatch
) -> None:
    redirector = Redirector(served.url(""))
    try:
        creds = GitCredentials(username="bot", password=TOKEN, hosts=(redirector.url.split("/")[2],))
        source = GitSource(
            redirector.url,
            GitRef(branch="main"),
            cache_dir=tmp_path / "c",
            attempts=1,
            credentials=creds,
            allow_local=True,
            ca_file=served.ca_file,
        )
        # the mirror holds the branch already (as after an earlier fetch), so the remote is asked first
        sh_git(tmp_path, "init", "-q", "--bare", str(source.mirror_path))
        sh_git(source.mirror_path, "fetch", "-q", str(policy_repo.bare), "+refs/heads/*:refs/heads/*")
        ran = spy_on_git(monkeypatch)
        with pytest.raises(
            GitSourceError, match="the server answered with a redirect, which is never followed"
        ):
            source.fetch()
    finally:
        redirector.close()
    assert [command for command, _ in ran] == ["ls-remote", "fetch"]
    assert len(redirector.requests) >= 2  # the ls-remote asked it too
    assert served.authorizations == []  # the redirect target never heard from git


@pytest.mark.parametrize(
    "url",
    [
        "https://169.254.169.254/latest/meta-data.git",  # a cloud's instance metadata
        "https://169.254.0.1:8443/x.git",
        "https://127.0.0.1/x.git",
        "https://localhost/x.git",  # a name: checked after DNS resolution
        "https://0.0.0.0/x.git",
        "https://224.0.0.1/x.git",
        "https://240.0.0.1/x.git",
        "git@169.254.169.254:x.git",
        "ssh://git@127.0.0.1:2222/x.git",
    ],
)
def test_special_targets_are_refused_before_git_runs(tmp_path: Path, monkeypatch, url: str) -> None:
    ran: list[str] = []
    real_popen = subprocess.Popen

    def recording_popen(args, *a, **kw):
        ran.append(" ".join(map(str, args)))
        return real_popen(args, *a, **kw)

    monkeypatch.setattr("kgwe.gitops.gitcmd.subprocess.Popen", recording_popen)
    monkeypatch.delenv("KGWE_ALLOW_GIT_NETWORKS")  # the default: no network allowed by the operator
    source = GitSource(url, GitRef(branch="main"), cache_dir=tmp_path / "c", attempts=1)
    with pytest.raises(
        UnsafeGitTarget, match="address, which git may not reach unless the controller's operator"
    ):
        source.fetch()
    assert not any(" fetch " in f" {cmd} " for cmd in ran)


def test_the_operator_may_allow_a_network(served, tmp_path: Path, monkeypatch) -> None:
    monkeypatch.delenv("KGWE_ALLOW_GIT_NETWORKS")
    url = served.url("policy.git")
    creds = GitCredentials(username="bot", password=TOKEN, hosts=(host_of(served),))
    with pytest.raises(UnsafeGitTarget, match="loopback address"):
        fetch(url, tmp_path / "a", credentials=creds, ca_file=served.ca_file, allowed_networks=None)
    other = (ipaddress.ip_network("10.0.0.0/8"),)
    with pytest.raises(UnsafeGitTarget, match="loopback address"):
        fetch(url, tmp_path / "b", credentials=creds, ca_file=served.ca_file, allowed_networks=other)
    monkeypatch.setenv("KGWE_ALLOW_GIT_NETWORKS", "127.0.0.1/32")
    assert "sha1:" in fetch(
        url, tmp_path / "c", credentials=creds, ca_file=served.ca_file, allowed_networks=None
    )


@pytest.mark.parametrize(
    ("address", "kind"),
    [
        ("::ffff:169.254.169.254", "link-local"),  # IPv4-mapped
        ("2002:a9fe:a9fe::1", "link-local"),  # 6to4 around 169.254.169.254
        ("fe80::1%eth0", "link-local"),
        ("::1", "loopback"),
        ("::", "unspecified"),
        ("ff02::1", "multicast"),
        ("127.8.8.8", "loopback"),
    ],
)
def test_every_spelling_of_a_special_address_is_refused(address: str, kind: str) -> None:
    """The addresses a DNS answer may hold (the name's resolution is given here: no DNS server involved)."""

    def answer(host, port, **kw):
        return [
            (
                socket.AF_INET6 if ":" in address else socket.AF_INET,
                socket.SOCK_STREAM,
                6,
                "",
                (address, port),
            )
        ]

    with pytest.raises(UnsafeGitTarget, match=f"a {kind} address"):
        check_target(Origin("https", "git.example.com", 443), resolve=answer)
    assert check_target(
        Origin("https", "git.example.com", 443),
        (ipaddress.ip_network("::/0"),) if ":" in address else (ipaddress.ip_network("0.0.0.0/0"),),
        resolve=answer,
    )


def test_a_non_git_port_gives_a_fixed_message_never_gits_own_words(tmp_path: Path) -> None:
    """An internal service that is not a Git server: status must not tell what answered (a port scanner)."""
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]

    def serve() -> None:
        for _ in range(2):
            conn, _ = listener.accept()
            conn.sendall(b"SSH-2.0-OpenSSH_9.6 internal-db-admin\r\n")
            conn.close()

    threading.Thread(target=serve, daemon=True).start()
    try:
        message = fetch(f"https://127.0.0.1:{port}/x.git", tmp_path)
    finally:
        listener.close()
    assert message.rsplit(": ", 1)[-1] in FIXED_MESSAGES, message
    for word in (
        "SSH-2.0",
        "OpenSSH",
        "internal-db-admin",
        "wrong version",
        "SSL routines",
        "unable to access",
    ):
        assert word not in message


def test_https_connects_only_to_the_addresses_checked() -> None:
    """DNS answering differently when git resolves again (rebinding) changes nothing: curl is pinned."""
    from kgwe.gitops.auth import git_environment

    with git_environment(None, url="https://localhost:8443/x.git", allowed_networks=LOOPBACK_NETWORKS) as env:
        count = int(env["GIT_CONFIG_COUNT"])
        config = {env[f"GIT_CONFIG_KEY_{i}"]: env[f"GIT_CONFIG_VALUE_{i}"] for i in range(count)}
    host, port, addresses = config["http.curloptResolve"].split(":", 2)
    assert (host, port) == ("localhost", "8443")
    pinned = [ipaddress.ip_address(a.strip("[]")) for a in addresses.split(",")]
    assert pinned and all(ip.is_loopback for ip in pinned)
    assert config["http.followRedirects"] == "false"


def test_a_resolver_that_never_answers_is_bounded_by_the_callers_deadline() -> None:
    """A DNS server that never answers must not hold the ref poll past spec.timeout: the lookup gets the
    caller's time and then a clear refusal, while the stuck lookup is left to libc's own limits."""
    release = threading.Event()
    calls: list[str] = []

    def stuck(host, port, **kw):
        calls.append(host)
        release.wait(60)
        raise OSError("never answered")

    try:
        with pytest.raises(UnsafeGitTarget, match=r"cannot resolve host 'git.example.com' within 0.2s"):
            check_target(Origin("https", "git.example.com", 443), resolve=stuck, timeout_seconds=0.2)
        assert calls == ["git.example.com"] and not release.is_set()
    finally:
        release.set()


def test_a_resolver_error_within_the_deadline_is_the_usual_refusal() -> None:
    def fails(host, port, **kw):
        raise socket.gaierror("Name or service not known")

    with pytest.raises(UnsafeGitTarget, match=r"cannot resolve host 'nowhere.example'$"):
        check_target(Origin("https", "nowhere.example", 443), resolve=fails, timeout_seconds=5)
