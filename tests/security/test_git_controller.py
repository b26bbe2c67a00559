"""The controller against hostile PolicyRepositories, on the real API server with a real HTTPS Git server:
bad URLs refused by the API server, invalid specs stalled with the field path, credentials only from
opted-in Secrets and never shown anywhere, and one hanging Git server not stalling other repositories."""

from __future__ import annotations

import base64
import json
import logging
import secrets
import socket
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from kgwe.gitops.gitcmd import GitAccess
from kgwe.localcluster.gitserver import GitHttpsServer
from kgwe.reconcile.controller import Controller
from kgwe.reconcile.repository import RepositoryReconciler
from tests.harness.policyrepos import delete_unreleased
from tests.harness.waiting import wait_for

NS = "kgwe-system"
PR = ("kgwe.nvidia.io", "v1", NS, "policyrepositories")
TOKEN = "ghp_" + "s3cr3t" * 6
SCORING = """apiVersion: kgwe.nvidia.io/v1
kind: ScoringProfile
metadata: {name: default}
spec: {strategy: BinPack}
"""

pytestmark = pytest.mark.usefixtures("policy_crds")


@pytest.fixture
def served(policy_repo, tmp_path: Path, monkeypatch) -> Iterator[GitHttpsServer]:
    """The policy repository over HTTPS, requiring the token; git trusts the test CA."""
    policy_repo.push({"policy/scoring.yaml": SCORING})
    with GitHttpsServer(tmp_path, username="kgwe-bot", password=TOKEN) as server:
        monkeypatch.setenv("GIT_SSL_CAINFO", server.ca_file)
        yield server


CREATED: list[str] = []


@pytest.fixture
def custom(k8s_api) -> Iterator[client.CustomObjectsApi]:
    api = client.CustomObjectsApi(k8s_api)
    yield api
    while CREATED:
        delete_unreleased(api, PR[2], CREATED.pop())


def create(custom, spec: dict, name: str | None = None) -> str:
    name = name or f"sec-{secrets.token_hex(3)}"
    body = {"apiVersion": "kgwe.nvidia.io/v1", "kind": "PolicyRepository", "metadata": {"name": name}}
    custom.create_namespaced_custom_object(*PR[:3], PR[3], {**body, "spec": spec})
    CREATED.append(name)
    return name


def secret(k8s_api, name: str, data: dict[str, str], labelled: bool = True, hosts: str = "") -> None:
    """A Secret of Git credentials, opted in (`labelled`) and bound to `hosts`."""
    labels = {"kgwe.nvidia.io/git-credentials": "true"} if labelled else {}
    annotations = {"kgwe.nvidia.io/git-hosts": hosts} if hosts else {}
    meta = {"name": name, "labels": labels, "annotations": annotations}
    client.CoreV1Api(k8s_api).create_namespaced_secret(NS, {"metadata": meta, "stringData": data})


def host_of(server: GitHttpsServer) -> str:
    return f"127.0.0.1:{server.port}"


def events(k8s_api, name: str) -> list[str]:
    items = client.CoreV1Api(k8s_api).list_namespaced_event(NS, field_selector=f"involvedObject.name={name}")
    return [f"{e.reason}: {e.message}" for e in items.items]


def ready(custom, name: str) -> dict:
    status = custom.get_namespaced_custom_object(*PR, name).get("status") or {}
    return next((c for c in status.get("conditions") or [] if c["type"] == "Ready"), {})


ATTACK = "--upload-pack=touch /tmp/pwned #://x"


def test_the_api_server_refuses_urls_kgwe_would_refuse(custom):
    for url in (ATTACK, "file:///var/cache/kgwe", "/srv/git/other.git", "https://u:pw@h/x.git"):
        with pytest.raises(ApiException) as err:
            create(custom, {"url": url})
        assert err.value.status == 422 and "spec.url" in err.value.body


def test_an_invalid_spec_stalls_with_the_field_path(k8s_api, custom, tmp_path):
    name = create(custom, {"url": "https://git.example.com/p.git", "timeout": "20m", "path": "policy"})
    rec = RepositoryReconciler(k8s_api, NS, name, cache_dir=tmp_path / "cache")
    outcome = rec.reconcile()
    assert outcome.phase == "spec_invalid" and "spec.timeout: timeout may be at most 10m" in outcome.message
    status = custom.get_namespaced_custom_object(*PR, name)["status"]
    stalled = next(c for c in status["conditions"] if c["type"] == "Stalled")
    assert stalled["reason"] == "InvalidSpec" and "spec.timeout" in stalled["message"]
    assert any(e.startswith("InvalidSpec: invalid spec: spec.timeout") for e in events(k8s_api, name))


def test_credentials_only_from_opted_in_secrets_and_never_shown(
    k8s_api, custom, served, tmp_path, monkeypatch, caplog
):
    argv: list[str] = []
    real_popen = subprocess.Popen

    def recording_popen(args, *a, **kw):  # the real Popen; only the command lines are kept
        argv.append(" ".join(map(str, args)))
        return real_popen(args, *a, **kw)

    monkeypatch.setattr("kgwe.gitops.gitcmd.subprocess.Popen", recording_popen)
    monkeypatch.setenv("GIT_TRACE_CURL", "1")  # the controller's environment must not make git print headers
    monkeypatch.setenv("GIT_CURL_VERBOSE", "1")
    monkeypatch.setenv("KGWE_GIT_TOKEN", TOKEN)  # never used for a PolicyRepository by default
    caplog.set_level(logging.DEBUG)
    base = {"url": served.url("policy.git"), "path": "policy", "interval": "1h"}

    # No secretRef: the controller's own token is not borrowed, so the server sees no credentials.
    name = create(custom, base)
    rec = RepositoryReconciler(k8s_api, NS, name, cache_dir=tmp_path / "c0", git_attempts=1)
    first = rec.reconcile()
    assert first.phase == "fetch_failed" and not any(served.authorizations)

    # A Secret without the opt-in label is never read.
    bound = host_of(served)
    secret(k8s_api, f"{name}-plain", {"username": "kgwe-bot", "password": TOKEN}, labelled=False, hosts=bound)
    custom.patch_namespaced_custom_object(*PR, name, {"spec": {"secretRef": {"name": f"{name}-plain"}}})
    unlabelled = rec.reconcile()
    assert unlabelled.phase == "fetch_failed"
    assert 'is not labelled kgwe.nvidia.io/git-credentials="true"' in unlabelled.message
    assert not any(served.authorizations)

    # A wrong token fails authentication; the right one works.
    secret(k8s_api, f"{name}-wrong", {"username": "kgwe-bot", "password": TOKEN[::-1]}, hosts=bound)
    custom.patch_namespaced_custom_object(*PR, name, {"spec": {"secretRef": {"name": f"{name}-wrong"}}})
    assert rec.reconcile().phase == "fetch_failed"
    secret(
        k8s_api, f"{name}-git", {"username": "kgwe-bot", "password": TOKEN}, hosts=f"{bound} git.example.com"
    )
    custom.patch_namespaced_custom_object(*PR, name, {"spec": {"secretRef": {"name": f"{name}-git"}}})
    good = rec.reconcile()
    assert good.attempted_revision, good.message

    # An SSH URL needs known_hosts: no trust on first use.
    ssh = create(custom, {**base, "url": "git@git.example.com:p.git", "secretRef": {"name": f"{name}-git"}})
    ssh_outcome = RepositoryReconciler(k8s_api, NS, ssh, cache_dir=tmp_path / "c1").reconcile()
    assert ssh_outcome.phase == "fetch_failed" and "has no known_hosts" in ssh_outcome.message

    basic = base64.b64encode(f"kgwe-bot:{TOKEN}".encode()).decode()
    outputs = {
        "argv": "\n".join(argv),
        "logs": caplog.text,
        "status": json.dumps([custom.get_namespaced_custom_object(*PR, n) for n in (name, ssh)]),
        "events": "\n".join(events(k8s_api, name) + events(k8s_api, ssh)),
        "outcomes": repr([first, unlabelled, good, ssh_outcome]),
    }
    for where, text in outputs.items():
        for needle in (TOKEN, TOKEN[::-1], basic):
            assert needle not in text, f"credential in {where}"
    assert argv  # git really ran


def hanging_server() -> socket.socket:
    """Accepts connections and never answers (a stuck or hostile Git server)."""
    sock = socket.create_server(("127.0.0.1", 0), backlog=16)
    return sock


def test_one_hanging_repository_does_not_stall_the_others(k8s_api, custom, served, tmp_path, monkeypatch):
    stuck = hanging_server()
    port = stuck.getsockname()[1]
    # Listed first (by name), with the longest allowed deadline: a serial controller would wait on it.
    slow = create(
        custom,
        {"url": f"https://127.0.0.1:{port}/slow.git", "timeout": "10m", "interval": "1h"},
        name=f"aaa-slow-{secrets.token_hex(3)}",
    )
    secret(k8s_api, f"{slow}-git", {"username": "kgwe-bot", "password": TOKEN}, hosts=host_of(served))
    good = create(
        custom,
        {
            "url": served.url("policy.git"),
            "path": "policy",
            "interval": "1h",
            "secretRef": {"name": f"{slow}-git"},
        },
        name=f"zzz-good-{secrets.token_hex(3)}",
    )
    controller = Controller(
        k8s_api, NS, cache_dir=tmp_path / "ctl", listen=None, leader_election=False, git_access=GitAccess()
    )
    stop = threading.Event()
    thread = threading.Thread(target=controller.run, args=(stop,), daemon=True)
    thread.start()
    try:

        def status_of(name: str) -> dict:
            return custom.get_namespaced_custom_object(*PR, name).get("status") or {}

        wait_for(
            "the good repository reconciled",
            lambda: (
                "lastAttemptedRevision"
                in (custom.get_namespaced_custom_object(*PR, good).get("status") or {})
            ),
            300,
        )
        # The slow one is still inside its fetch (no outcome yet) while the good one went through.
        assert "status" not in custom.get_namespaced_custom_object(*PR, slow)
    finally:
        stop.set()
        stuck.close()  # the hanging fetch gets a closed connection and ends
        thread.join(timeout=60)


def test_a_secret_goes_only_to_the_hosts_it_names(
    k8s_api, custom, served, policy_repo, tmp_path, monkeypatch
):
    """A tenant points a PolicyRepository at a server of theirs (one git trusts) and names the platform's
    Secret: the controller refuses before any request, and says why in status."""
    name = create(custom, {"url": served.url("policy.git"), "path": "policy", "interval": "1h"})
    secret(k8s_api, f"{name}-git", {"username": "kgwe-bot", "password": TOKEN}, hosts=host_of(served))
    with GitHttpsServer(policy_repo.bare.parent, username="kgwe-bot", password="x") as attacker:
        both = tmp_path / "both-cas.pem"
        both.write_text(Path(served.ca_file).read_text() + Path(attacker.ca_file).read_text())
        monkeypatch.setenv("GIT_SSL_CAINFO", str(both))
        custom.patch_namespaced_custom_object(
            *PR, name, {"spec": {"url": attacker.url("policy.git"), "secretRef": {"name": f"{name}-git"}}}
        )
        outcome = RepositoryReconciler(k8s_api, NS, name, cache_dir=tmp_path / "c").reconcile()
        assert outcome.phase == "fetch_failed"
        assert f"bound to {host_of(served)}, not to {host_of(attacker)}; they are not sent" in outcome.message
        assert attacker.authorizations == []
    assert f"not to {host_of(attacker)}" in ready(custom, name)["message"]

    # Without the binding annotation a Secret is sent nowhere.
    bare = f"{name}-unbound"
    secret(k8s_api, bare, {"username": "kgwe-bot", "password": TOKEN})
    custom.patch_namespaced_custom_object(
        *PR, name, {"spec": {"url": served.url("policy.git"), "secretRef": {"name": bare}}}
    )
    unbound = RepositoryReconciler(k8s_api, NS, name, cache_dir=tmp_path / "c2").reconcile()
    assert "names no host in its kgwe.nvidia.io/git-hosts annotation" in unbound.message
    assert not any(served.authorizations)


def test_metadata_and_loopback_targets_are_refused_with_a_clear_status(
    k8s_api, custom, tmp_path, monkeypatch
):
    monkeypatch.delenv("KGWE_ALLOW_GIT_NETWORKS")  # the controller's default: no special network allowed
    for url, kind in (
        ("https://169.254.169.254/computeMetadata/v1.git", "link-local"),
        ("https://localhost:6443/api.git", "loopback"),
    ):
        name = create(custom, {"url": url, "interval": "1h"})
        outcome = RepositoryReconciler(k8s_api, NS, name, cache_dir=tmp_path / name).reconcile()
        assert outcome.phase == "fetch_failed" and f"resolves to a {kind} address" in outcome.message
        assert f"a {kind} address" in ready(custom, name)["message"]
        assert any(e.startswith("GitOperationFailed:") and kind in e for e in events(k8s_api, name))
