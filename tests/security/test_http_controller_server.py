"""Attacks on the controller's webhook/health/metrics port, through the real server on loopback: slow
clients cannot hold it or starve /healthz, a delivery is accepted once, GitLab's token works beside GitHub's
HMAC, and a push syncs only the PolicyRepositories whose URL it names (in any spelling)."""

from __future__ import annotations

import json
import socket
import threading
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator

import pytest
from kubernetes import client

from kgwe.gitops.webhook import ControllerHTTPServer, PushEvent, repository_key, sign
from kgwe.httpd import Limits
from tests.harness.crds import install_crds
from tests.harness.waiting import wait_for

SECRET = b"hook-secret"
REPO = "https://git.example.com/platform/gpu-policy.git"


@pytest.fixture
def server() -> Iterator[tuple[ControllerHTTPServer, list[PushEvent]]]:
    got: list[PushEvent] = []
    srv = ControllerHTTPServer(
        ("127.0.0.1", 0),
        secret=SECRET,
        on_push=got.append,
        get_routes={"/healthz": lambda: (200, "text/plain", b"ok")},
        limits=Limits(header_timeout_seconds=1.0, request_timeout_seconds=1.0, max_connections=16),
    ).start()
    yield srv, got
    srv.stop()


def healthz(port: int) -> bytes:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=5) as resp:
        return resp.read()


def push_body(after: str = "a" * 40, url: str = REPO) -> bytes:
    return json.dumps(
        {"ref": "refs/heads/main", "after": after, "commits": [], "repository": {"clone_url": url}}
    ).encode()


def post(port: int, body: bytes, headers: dict[str, str]) -> tuple[int, dict]:
    req = urllib.request.Request(
        f"http://127.0.0.1:{port}/hooks/git",
        data=body,
        method="POST",
        headers={"Content-Type": "application/json", **headers},
    )
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read())


def github(body: bytes, delivery: str | None = None) -> dict[str, str]:
    return {
        "X-GitHub-Event": "push",
        "X-Hub-Signature-256": sign(SECRET, body),
        "X-GitHub-Delivery": delivery or str(uuid.uuid4()),
    }


def test_slow_loris_clients_neither_hold_the_server_nor_starve_healthz(server) -> None:
    srv, _ = server
    idle = [socket.create_connection(("127.0.0.1", srv.port), timeout=10) for _ in range(30)]
    time.sleep(0.2)
    slow = []
    for _ in range(12):  # headers promise a body that never comes
        s = socket.create_connection(("127.0.0.1", srv.port), timeout=10)
        s.sendall(b"POST /hooks/git HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\n{")
        slow.append(s)
    try:
        time.sleep(0.3)
        assert healthz(srv.port) == b"ok"  # answered at once, beside 42 stuck or idle connections
        started = time.monotonic()
        for s in slow:  # each is answered 408 and closed by the server after its 1 s deadline
            data = b""
            while chunk := s.recv(4096):
                data += chunk
            assert data.startswith(b"HTTP/1.1 408 "), data[:100]
        assert time.monotonic() - started < 8
        assert healthz(srv.port) == b"ok"
    finally:
        for s in slow + idle:
            s.close()


def test_a_delivery_is_accepted_once(server) -> None:
    srv, got = server
    body = push_body()
    headers = github(body)
    assert post(srv.port, body, headers)[0] == 202
    status, reply = post(srv.port, body, headers)  # replayed as captured
    assert status == 409 and "replay" in reply["error"]
    status, _ = post(srv.port, body, {**headers, "X-GitHub-Delivery": str(uuid.uuid4())})  # new ID, same body
    assert status == 409
    assert post(srv.port, push_body("b" * 40), github(push_body("b" * 40)))[0] == 202
    deadline = time.monotonic() + 5
    while len(got) < 2 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert [e.after for e in got] == ["a" * 40, "b" * 40]


def test_replay_memory_is_bounded() -> None:
    from kgwe.gitops.webhook import ReplayGuard

    guard = ReplayGuard(limit=100)
    for i in range(1000):
        assert not guard.seen(f"id:{i}")
    assert len(guard._seen) == 100 and guard.seen("id:999") and not guard.seen("id:0")


def test_gitlab_token_and_push_hook(server) -> None:
    srv, got = server
    body = json.dumps(
        {
            "object_kind": "push",
            "ref": "refs/heads/main",
            "after": "c" * 40,
            "commits": [{"added": [], "modified": ["policy/mig.yaml"], "removed": []}],
            "project": {"git_ssh_url": "git@git.example.com:platform/gpu-policy.git"},
        }
    ).encode()
    gitlab = {"X-Gitlab-Event": "Push Hook", "X-Gitlab-Event-UUID": str(uuid.uuid4())}
    status, reply = post(srv.port, body, {**gitlab, "X-Gitlab-Token": "wrong"})
    assert status == 401 and "X-Gitlab-Token" in reply["error"]
    assert post(srv.port, body, {**gitlab, "X-Gitlab-Token": SECRET.decode()})[0] == 202
    deadline = time.monotonic() + 5
    while not got and time.monotonic() < deadline:
        time.sleep(0.05)
    assert got[0].repositories == {"git.example.com/platform/gpu-policy"}
    assert got[0].changed_paths == ("policy/mig.yaml",)


def test_unsigned_and_repositoryless_pushes_trigger_nothing(server) -> None:
    srv, got = server
    body = push_body()
    status, reply = post(srv.port, body, {"X-GitHub-Event": "push"})
    assert status == 401 and "missing" in reply["error"]
    bare = json.dumps({"ref": "refs/heads/main", "after": "d" * 40}).encode()
    status, reply = post(srv.port, bare, github(bare))
    assert status == 202 and "names no repository" in reply["message"]
    time.sleep(0.2)
    assert got == []


@pytest.mark.parametrize(
    "url",
    [
        "https://git.example.com/platform/gpu-policy.git",
        "https://Git.Example.com/platform/gpu-policy/",
        "http://git.example.com:8080/platform/gpu-policy",
        "ssh://git@git.example.com:2222/platform/gpu-policy.git",
        "git@git.example.com:platform/gpu-policy.git",
        "git.example.com:platform/gpu-policy",
    ],
)
def test_url_spellings_of_one_repository_match(url: str) -> None:
    assert repository_key(url) == "git.example.com/platform/gpu-policy"


def test_different_repositories_do_not_match() -> None:
    keys = {
        repository_key(u)
        for u in (
            "https://git.example.com/platform/gpu-policy.git",
            "https://git.example.com/platform/gpu-policy-staging.git",
            "https://other.example.com/platform/gpu-policy.git",
            "git@git.example.com:someone-else/gpu-policy.git",
        )
    }
    assert len(keys) == 4


@pytest.mark.cluster
def test_a_push_reconciles_only_the_repositories_it_names(k8s_api, namespace) -> None:
    """Three PolicyRepositories on the real API server; a push naming one of them in scp-like form
    reconciles that one and no other (reconciles are recorded, no Git server needed)."""
    from kgwe.reconcile.controller import Controller

    install_crds(k8s_api)
    custom = client.CustomObjectsApi(k8s_api)
    urls = {
        "named": "https://git.example.com/platform/gpu-policy.git",
        "other": "https://git.example.com/platform/other-policy.git",
        "elsewhere": "ssh://git@other.example.com/platform/gpu-policy.git",
    }
    for name, url in urls.items():
        body = {
            "apiVersion": "kgwe.nvidia.io/v1",
            "kind": "PolicyRepository",
            "metadata": {"name": name},
            "spec": {"url": url, "ref": {"branch": "main"}, "interval": "1h"},
        }
        custom.create_namespaced_custom_object("kgwe.nvidia.io", "v1", namespace, "policyrepositories", body)

    reconciled: list[str] = []

    class Recorder:
        """A reconciler that only records that it ran (no Git server needed)."""

        def __init__(self, name: str) -> None:
            self.name = name
            self.last_read = {"kind": "PolicyRepository"}  # the repository is there

        def reconcile(self, pushed: bool = False) -> None:
            reconciled.append(self.name)

        def interval_seconds(self) -> float:
            return 3600.0

    class Recording(Controller):
        def _reconciler(self, name):  # type: ignore[override]
            return Recorder(name)

    c = Recording(k8s_api, namespace, cache_dir="/nonexistent", listen=None, leader_election=False)
    stop = threading.Event()
    c.repositories.start(stop)
    try:
        queue = c.repositories.loop.queue
        wait_for("each repository seen once", lambda: sorted(reconciled) == sorted(urls) and queue.idle())
        reconciled.clear()  # nothing more is due for an hour
        named = frozenset({repository_key("git@git.example.com:platform/gpu-policy")})
        c.on_push(PushEvent("refs/heads/main", "e" * 40, "push", ("policy/mig.yaml",), named))
        wait_for("the named repository reconciled", lambda: reconciled and queue.idle())
        assert reconciled == ["named"]
    finally:
        stop.set()
