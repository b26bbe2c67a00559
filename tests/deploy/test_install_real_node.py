"""The README's install, for real: the KGWE image on the local cluster's real node (containerd, kubelet,
CoreDNS, kube-proxy), kwok GPU nodes from sample-repo's inventory, and the seed `helm install ... --wait`
with nothing else — no Secret, certificate or ConfigMap made by hand.

In order, on one release: it comes up (the controller's leader issued the webhook's certificate and
caBundle, kgwe-scheduler started with KGWE's default configuration, `helm test` passes); a GPU pod of an
opted-in namespace is mutated by the webhook pod and placed by the kgwe-scheduler pod through its extender
onto a kwok GPU node; a PolicyRepository served over https from the host reaches the controller pod (its
private CA given by `helm upgrade`, which rolls the controller) and changes the scheduler's configuration;
a forced certificate rotation keeps pods being mutated and placed while the webhook rereads its files; an
image nobody can pull shows in the pods' events; `helm uninstall` removes everything but the CRDs."""

from __future__ import annotations

import base64
import datetime as dt
import json
import secrets
import socket
import ssl
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import yaml
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from kgwe.certs import x509
from kgwe.certs.rotation import PREVIOUS_CA_UNTIL_ANNOTATION, ROTATE_ANNOTATION, ROTATED_ANNOTATION
from kgwe.localcluster.controlplane import host_ip
from kgwe.localcluster.gitserver import GitHttpsServer
from kgwe.vocab import (
    CA_SECRET,
    SCHEDULER_CONFIG_HASH_ANNOTATION,
    SCHEDULER_CONFIGMAP,
    SCHEDULING_ENABLED,
    SCHEDULING_NAMESPACE_LABEL,
    WEBHOOK_CONFIGURATION,
    WEBHOOK_TLS_SECRET,
)
from tests.harness.chart import CHART_DIR, helm
from tests.harness.waiting import wait_for

pytestmark = [pytest.mark.cluster, pytest.mark.realnode, pytest.mark.image, pytest.mark.timeout(3600)]

NS = "kgwe-system"
CRDS = ("policyrepositories.kgwe.nvidia.io", "gpuworkloads.kgwe.nvidia.io")
# The README's command, with the chart's path for kgwe/kgwe, routing GPU pods with the webhook server (what
# the chart picks on clusters before 1.36): its pods, certificate and rotation are what this module checks.
# The routing policy the chart picks on this 1.37 cluster: tests/deploy/test_helm_install.py and
# tests/admission/test_routing_policy.py.
SEED = (
    "install", "kgwe", str(CHART_DIR), "--namespace", NS, "--create-namespace",
    "--set", "scheduler.enabled=true", "--set", "migController.enabled=true",
    "--set", "webhook.routeWith=Webhook",
)  # fmt: skip
GIT_ENV = {
    "GIT_AUTHOR_NAME": "t",
    "GIT_AUTHOR_EMAIL": "t@x",
    "GIT_COMMITTER_NAME": "t",
    "GIT_COMMITTER_EMAIL": "t@x",
}


def wait(
    what: str, check: Callable[[], Any], timeout: float = 240, state: Callable[[], str] = lambda: ""
) -> Any:
    """Poll `check` until it returns something truthy (an API error counts as not yet); fail naming `what`
    and the cluster's state otherwise."""
    return wait_for(what, check, timeout, retry_on=(ApiException,), describe=state)


@pytest.fixture(scope="module")
def release(_real_node_session, kgwe_image, chart, tmp_path_factory) -> Iterator[SimpleNamespace]:
    """The session's local cluster (the `local_cluster` fixture's, for this module's several tests) with the
    KGWE image imported into its real node, then the seed install (timed)."""
    local_cluster = _real_node_session.ensure()
    local_cluster.import_image(kgwe_image.archive)
    cp = local_cluster.cp
    home = tmp_path_factory.mktemp("helm-home")
    env = {
        "KUBECONFIG": str(cp.kubeconfig_path),
        "HELM_CACHE_HOME": str(home / "cache"),
        "HELM_CONFIG_HOME": str(home / "config"),
        "HELM_DATA_HOME": str(home / "data"),
    }
    api = cp.api_client()
    run = SimpleNamespace(api=api, env=env, cp=cp, uninstalled=False, figures={})

    def pods_state() -> str:
        return _pods_state(api, NS)

    run.state = pods_state
    started, run.started_at = time.monotonic(), dt.datetime.now(dt.UTC)
    out = helm(*SEED, "--wait", "--timeout", "10m", env=env, check=False)
    run.figures["helm_install_ready_seconds"] = round(time.monotonic() - started, 1)
    if out.returncode != 0:
        pytest.fail(f"the seed install failed: {out.stderr}\n{pods_state()}", pytrace=False)
    run.notes = out.stdout
    try:
        yield run
    finally:
        print(json.dumps(run.figures))
        if not run.uninstalled:
            helm("uninstall", "kgwe", "--namespace", NS, "--wait", "--timeout", "5m", env=env, check=False)
        client.CoreV1Api(api).delete_namespace(NS)


def _pods_state(api: client.ApiClient, namespace: str) -> str:
    lines = []
    for pod in client.CoreV1Api(api).list_namespaced_pod(namespace).items:
        statuses = [
            f"{c.name}:{'ready' if c.ready else (c.state.waiting.reason if c.state.waiting else 'not ready')}"
            f"(restarts {c.restart_count})"
            for c in (pod.status.init_container_statuses or []) + (pod.status.container_statuses or [])
        ]
        lines.append(
            f"  {pod.metadata.name} {pod.status.phase} on {pod.spec.node_name}: {' '.join(statuses)}"
        )
    return "pods:\n" + "\n".join(lines)


def _ready(api: client.ApiClient, component: str, namespace: str = NS) -> list[client.V1Pod]:
    pods = client.CoreV1Api(api).list_namespaced_pod(
        namespace, label_selector=f"app.kubernetes.io/component={component}"
    )
    return [
        p
        for p in pods.items
        if p.metadata.deletion_timestamp is None
        and any(c.type == "Ready" and c.status == "True" for c in p.status.conditions or [])
    ]


def _logs(api: client.ApiClient, pod: str, container: str) -> str:
    return client.CoreV1Api(api).read_namespaced_pod_log(pod, NS, container=container)


def _test_pod_log(api: client.ApiClient) -> str:
    try:
        return client.CoreV1Api(api).read_namespaced_pod_log("kgwe-install-test", NS)
    except client.ApiException as exc:
        return f"(no log of kgwe-install-test: {exc.status} {exc.reason})"


def _secret_data(api: client.ApiClient, name: str, key: str) -> bytes:
    secret = client.CoreV1Api(api).read_namespaced_secret(name, NS)
    return base64.b64decode(secret.data[key])


def _served_certificate(api: client.ApiClient) -> bytes:
    """The certificate the webhook's Service serves now, as the API server reaches it (through kube-proxy)."""
    ip = client.CoreV1Api(api).read_namespaced_service("kgwe-webhook", NS).spec.cluster_ip
    ctx = ssl.create_default_context()
    ctx.check_hostname, ctx.verify_mode = False, ssl.CERT_NONE
    with socket.create_connection((ip, 443), timeout=5) as raw, ctx.wrap_socket(raw) as tls:
        der = tls.getpeercert(binary_form=True)
    return ssl.DER_cert_to_PEM_cert(der).encode()


def _gpu_nodes(api: client.ApiClient) -> set[str]:
    nodes = client.CoreV1Api(api).list_node(label_selector="nvidia.com/gpu.present=true").items
    return {n.metadata.name for n in nodes}


def _gpu_pod(name: str, gpus: int = 1, annotations: dict[str, str] | None = None) -> dict:
    """A pod that names no scheduler and asks for whole GPUs (the webhook routes it)."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "annotations": annotations or {}},
        "spec": {
            "terminationGracePeriodSeconds": 0,
            "containers": [
                {"name": "main", "image": "nvcr.io/nvidia/cuda:12.4.1-base-ubuntu22.04",
                 "resources": {"limits": {"nvidia.com/gpu": str(gpus)}}}
            ],
        },
    }  # fmt: skip


@pytest.fixture(scope="module")
def opted_in(release) -> Iterator[str]:
    core = client.CoreV1Api(release.api)
    name = f"ml-{secrets.token_hex(3)}"
    core.create_namespace(
        {"metadata": {"name": name, "labels": {SCHEDULING_NAMESPACE_LABEL: SCHEDULING_ENABLED}}}
    )
    yield name
    core.delete_collection_namespaced_pod(name, grace_period_seconds=0)
    core.delete_namespace(name)


def _placed(api: client.ApiClient, namespace: str, name: str) -> str | None:
    pod = client.CoreV1Api(api).read_namespaced_pod(name, namespace)
    return pod.spec.node_name


def test_the_seed_install_comes_up_with_nothing_made_by_hand(release):
    api = release.api
    for component, want in (("controller", 2), ("scheduler", 2), ("webhook", 2)):
        assert len(_ready(api, component)) == want, f"{component}\n{release.state()}"
    assert _ready(api, "agent", "gpu-operator"), "the agent runs beside the GPU Operator"
    notes = release.notes.split("NOTES:", 1)[1]
    assert "extender    in each kgwe-scheduler pod, http://127.0.0.1:8888" in notes and "WARNING" not in notes
    # certificates: the controller's leader made them, and the webhook configuration trusts its CA
    ca_bundle = _secret_data(api, CA_SECRET, "ca.crt")
    webhook_cert = _secret_data(api, WEBHOOK_TLS_SECRET, "tls.crt")
    assert x509.signed_by(webhook_cert, ca_bundle)
    assert f"kgwe-webhook.{NS}.svc" in x509.read(webhook_cert).dns_names
    managers = {
        m.manager
        for m in client.CoreV1Api(api).read_namespaced_secret(CA_SECRET, NS).metadata.managed_fields or []
    }
    assert managers == {"kgwe-controller"}
    config = client.AdmissionregistrationV1Api(api).read_mutating_webhook_configuration(WEBHOOK_CONFIGURATION)
    assert base64.b64decode(config.webhooks[0].client_config.ca_bundle) == ca_bundle
    assert _served_certificate(api) == webhook_cert  # what the API server gets from the webhook pods
    # where the install's time goes: the certificate's issue, then the webhook pods' kubelet remounting it
    issued = client.CoreV1Api(api).read_namespaced_secret(WEBHOOK_TLS_SECRET, NS).metadata.creation_timestamp
    ready = max(
        c.last_transition_time
        for p in _ready(api, "webhook")
        for c in p.status.conditions
        if c.type == "Ready"
    )
    release.figures["webhook_certificate_issued_seconds"] = round(
        (issued - release.started_at).total_seconds(), 1
    )
    release.figures["webhook_ready_seconds"] = round((ready - release.started_at).total_seconds(), 1)
    # kgwe-scheduler runs before any policy: KGWE's default configuration, chosen by its init container
    for pod in _ready(api, "scheduler"):
        assert "no kgwe-scheduler-config yet: KGWE's default configuration" in _logs(
            api, pod.metadata.name, "config"
        )
        assert {c.name for c in pod.spec.containers} == {"kube-scheduler", "extender"}
        assert pod.spec.node_name == release.cp.node.name  # ordinary pods on the real node
    tested = helm("test", "kgwe", "--namespace", NS, "--timeout", "5m", env=release.env, check=False)
    # a passing test pod is deleted (hook-succeeded), so `helm test --logs` fails on success; a failing one
    # stays, and its log says which check failed and why
    assert tested.returncode == 0, f"helm test: {tested.stdout}{tested.stderr}{_test_pod_log(api)}"
    assert "Phase:          Succeeded" in tested.stdout


def test_a_gpu_pod_is_mutated_by_the_webhook_pod_and_placed_by_kgwe_scheduler_through_its_extender(
    release, opted_in
):
    api, core = release.api, client.CoreV1Api(release.api)
    started = time.monotonic()
    core.create_namespaced_pod(
        opted_in, _gpu_pod("two-gpus", 2, {"kgwe.nvidia.io/topology-preference": "NVLinkOptimal"})
    )
    pod = core.read_namespaced_pod("two-gpus", opted_in)
    assert pod.spec.scheduler_name == "kgwe-scheduler"  # the webhook pod's patch, at creation
    node = wait("the GPU pod placed", lambda: _placed(api, opted_in, "two-gpus"), 180, release.state)
    release.figures["first_gpu_pod_placed_seconds"] = round(time.monotonic() - started, 1)
    assert node in _gpu_nodes(api)
    events = core.list_namespaced_event(
        opted_in, field_selector="involvedObject.name=two-gpus,reason=Scheduled"
    )
    reporters = {e.reporting_component or (e.source.component if e.source else None) for e in events.items}
    assert reporters == {"kgwe-scheduler"}, reporters
    # the extender decides: a GPU product no node has is refused with its reasons in the pod's events
    core.create_namespaced_pod(
        opted_in, _gpu_pod("no-such-gpu", 1, {"kgwe.nvidia.io/gpu-product": "NVIDIA-Imaginary"})
    )

    def refused() -> list[str]:
        events = core.list_namespaced_event(
            opted_in, field_selector="involvedObject.name=no-such-gpu,reason=FailedScheduling"
        )
        return [e.message for e in events.items if "kgwe" in (e.message or "")]

    messages = wait("the extender's reasons in FailedScheduling", refused, 120, release.state)
    assert any("kgwe: GPU product" in m for m in messages), messages
    core.delete_namespaced_pod("no-such-gpu", opted_in, grace_period_seconds=0)


def _git(cwd: Path, *args: str) -> str:
    return subprocess.run(
        ["git", *args],
        cwd=cwd,
        env={**GIT_ENV, "PATH": "/usr/bin:/bin"},
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()


def _scoring(percentage: int) -> str:
    return (
        "apiVersion: kgwe.nvidia.io/v1\nkind: ScoringProfile\nmetadata:\n  name: default\nspec:\n"
        "  default: true\n  strategy: BinPack\n"
        "  extender: {weight: 5, ignorable: false, httpTimeout: 2s, "
        f"percentageOfNodesToScore: {percentage}}}\n"
    )


def _condition(repo: dict, kind: str) -> dict:
    return next((c for c in (repo.get("status") or {}).get("conditions") or [] if c["type"] == kind), {})


def test_a_policy_repository_over_https_from_the_host_changes_the_scheduler_config(release, tmp_path):
    api, core, apps = release.api, client.CoreV1Api(release.api), client.AppsV1Api(release.api)
    custom = client.CustomObjectsApi(release.api)
    bare, work = tmp_path / "policy.git", tmp_path / "work"
    _git(tmp_path, "init", "-q", "--bare", "-b", "main", str(bare))
    _git(tmp_path, "clone", "-q", str(bare), str(work))
    (work / "scoring").mkdir()
    (work / "scoring" / "default.yaml").write_text(_scoring(50))
    _git(work, "add", "-A")
    _git(work, "commit", "-qm", "scoring")
    _git(work, "push", "-q", "origin", "HEAD:main")
    host = host_ip()

    def repository(name: str, url: str) -> dict:
        spec = {"url": url, "ref": {"branch": "main"}, "interval": "10s", "timeout": "20s"}
        return {
            "apiVersion": "kgwe.nvidia.io/v1",
            "kind": "PolicyRepository",
            "metadata": {"name": name},
            "spec": spec,
        }

    # an unreachable Git server says so in the status and Events (nothing applied, nothing crashes)
    custom.create_namespaced_custom_object(
        "kgwe.nvidia.io",
        "v1",
        NS,
        "policyrepositories",
        repository("unreachable", f"https://{host}:1/none.git"),
    )
    ready = wait(
        "the unreachable repository's status",
        lambda: (
            (
                c := _condition(
                    custom.get_namespaced_custom_object(
                        "kgwe.nvidia.io", "v1", NS, "policyrepositories", "unreachable"
                    ),
                    "Ready",
                )
            )
            and c.get("status") == "False"
            and c
        ),
        120,
    )
    assert "Connection refused" in ready["message"] or "connect" in ready["message"], ready
    custom.delete_namespaced_custom_object("kgwe.nvidia.io", "v1", NS, "policyrepositories", "unreachable")

    with GitHttpsServer(tmp_path, host=host) as server:
        # the Git server's private CA for the controller: `helm upgrade` with a changed value rolls it
        core.create_namespaced_secret(
            NS,
            {"metadata": {"name": "host-git-ca"}, "stringData": {"ca.crt": Path(server.ca_file).read_text()}},
        )
        before = {p.metadata.name for p in _ready(api, "controller")}
        upgrade = helm(
            "upgrade", "kgwe", str(CHART_DIR), "--namespace", NS, "--reuse-values",
            "--set", "migController.gitCASecretName=host-git-ca", "--wait", "--timeout", "5m",
            env=release.env, check=False,
        )  # fmt: skip
        assert upgrade.returncode == 0, upgrade.stderr
        after = {p.metadata.name for p in _ready(api, "controller")}
        assert len(after) == 2 and not before & after, "the controller's pods rolled onto the new value"
        scheduler_pods = {p.metadata.name for p in _ready(api, "scheduler")}
        custom.create_namespaced_custom_object(
            "kgwe.nvidia.io",
            "v1",
            NS,
            "policyrepositories",
            repository("gpu-policy", server.url("policy.git")),
        )

        def rendered() -> dict | None:
            cm = core.read_namespaced_config_map(SCHEDULER_CONFIGMAP, NS)
            config = yaml.safe_load(cm.data["scheduler-config.yaml"])
            return config if config["percentageOfNodesToScore"] == 50 else None

        wait("the policy's scheduler configuration", rendered, 240, release.state)
        digest = wait(
            "the config hash on kgwe-scheduler",
            lambda: (
                apps.read_namespaced_deployment("kgwe-scheduler", NS).spec.template.metadata.annotations or {}
            ).get(SCHEDULER_CONFIG_HASH_ANNOTATION),
            120,
        )
        wait(
            "kgwe-scheduler rolled onto the policy's configuration",
            lambda: (
                len(now := {p.metadata.name for p in _ready(api, "scheduler")}) == 2
                and not now & scheduler_pods
            ),
            300,
            release.state,
        )
        for pod in _ready(api, "scheduler"):
            log = _logs(api, pod.metadata.name, "config")
            assert f"the policy's configuration from kgwe-scheduler-config ({digest})" in log, log

        def controller_logs() -> str:
            return "\n".join(
                _logs(api, p.metadata.name, "controller")[-3000:] for p in _ready(api, "controller")
            )

        def repository_ready() -> bool:
            repo = custom.get_namespaced_custom_object(
                "kgwe.nvidia.io", "v1", NS, "policyrepositories", "gpu-policy"
            )
            return _condition(repo, "Ready").get("status") == "True"

        wait("the PolicyRepository Ready", repository_ready, 120, controller_logs)
        custom.delete_namespaced_custom_object("kgwe.nvidia.io", "v1", NS, "policyrepositories", "gpu-policy")


def test_a_forced_certificate_rotation_keeps_pods_being_mutated_and_placed(release, opted_in):
    api, core = release.api, client.CoreV1Api(release.api)
    old_bundle = _secret_data(api, CA_SECRET, "ca.crt")
    webhook_pods = {p.metadata.uid for p in _ready(api, "webhook")}
    token = secrets.token_hex(4)
    core.patch_namespaced_secret(CA_SECRET, NS, {"metadata": {"annotations": {ROTATE_ANNOTATION: token}}})
    ca = wait(
        "the controller to rotate the CA",
        lambda: (
            (s := core.read_namespaced_secret(CA_SECRET, NS)).metadata.annotations.get(ROTATED_ANNOTATION)
            == token
            and s
        ),
        120,
    )
    assert PREVIOUS_CA_UNTIL_ANNOTATION in ca.metadata.annotations
    new_cert = _secret_data(api, WEBHOOK_TLS_SECRET, "tls.crt")
    assert x509.split_bundle(base64.b64decode(ca.data["ca.crt"]))[1:] == x509.split_bundle(old_bundle)[:1]
    created = 0
    started = time.monotonic()

    def served_after_one_more_pod() -> bool:
        """Place one more GPU pod while the webhook pods have not reread the renewed Secret yet."""
        nonlocal created
        if _served_certificate(api) == new_cert:
            return True
        name = f"during-rotation-{created}"
        created += 1
        core.create_namespaced_pod(opted_in, _gpu_pod(name))
        assert core.read_namespaced_pod(name, opted_in).spec.scheduler_name == "kgwe-scheduler", name
        wait(f"{name} placed", lambda: _placed(api, opted_in, name), 120, release.state)
        core.delete_namespaced_pod(name, opted_in, grace_period_seconds=0)
        return _served_certificate(api) == new_cert

    wait("the webhook serving its renewed certificate", served_after_one_more_pod, 240, release.state)
    release.figures["rotation_to_served_seconds"] = round(time.monotonic() - started, 1)
    core.create_namespaced_pod(opted_in, _gpu_pod("after-rotation"))
    assert core.read_namespaced_pod("after-rotation", opted_in).spec.scheduler_name == "kgwe-scheduler"
    wait("after-rotation placed", lambda: _placed(api, opted_in, "after-rotation"), 120, release.state)
    assert {p.metadata.uid for p in _ready(api, "webhook")} == webhook_pods, "reloaded, not restarted"
    assert all(c.restart_count == 0 for p in _ready(api, "webhook") for c in p.status.container_statuses)


def test_an_image_nobody_can_pull_shows_in_the_pods_events(release):
    core = client.CoreV1Api(release.api)
    revision = json.loads(
        helm("history", "kgwe", "--namespace", NS, "--output", "json", env=release.env).stdout
    )[-1]
    helm(
        "upgrade", "kgwe", str(CHART_DIR), "--namespace", NS, "--reuse-values",
        "--set", "image.tag=0.0.0-not-built", env=release.env,
    )  # fmt: skip

    def pull_failures() -> list[str]:
        events = core.list_namespaced_event(NS).items
        return [
            f"{e.involved_object.name}: {e.reason}: {e.message}"
            for e in events
            if e.reason in ("Failed", "ErrImagePull", "BackOff") and "0.0.0-not-built" in (e.message or "")
        ]

    failures = wait("the pull failure in the events", pull_failures, 180, release.state)
    assert any("ghcr.io/kgwe/kgwe:0.0.0-not-built" in f for f in failures), failures
    rolled_back = helm(
        "rollback", "kgwe", str(revision["revision"]), "--namespace", NS, "--wait", "--timeout", "5m",
        env=release.env, check=False,
    )  # fmt: skip
    assert rolled_back.returncode == 0, rolled_back.stderr


def test_helm_uninstall_keeps_the_crds_and_removes_the_rest(release):
    api = release.api
    out = helm("uninstall", "kgwe", "--namespace", NS, "--wait", "--timeout", "5m", env=release.env)
    release.uninstalled = True
    assert "uninstalled" in out.stdout
    crds = {c.metadata.name for c in client.ApiextensionsV1Api(api).list_custom_resource_definition().items}
    assert set(CRDS) <= crds
    core = client.CoreV1Api(api)
    wait(
        "the certificates gone with the controller",
        lambda: (
            not [
                s.metadata.name
                for s in core.list_namespaced_secret(NS).items
                if s.metadata.name.startswith("kgwe-")
            ]
        ),
        120,
    )
    wait("KGWE's pods gone", lambda: not core.list_namespaced_pod(NS).items, 180, release.state)
    assert not client.AppsV1Api(api).list_namespaced_daemon_set("gpu-operator").items
    with pytest.raises(ApiException) as gone:
        client.AdmissionregistrationV1Api(api).read_mutating_webhook_configuration(WEBHOOK_CONFIGURATION)
    assert gone.value.status == 404
