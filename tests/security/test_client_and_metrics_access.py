"""Nobody is served by omission: a TLS port without a client CA, or plain HTTP off loopback, refuses to start
unless --insecure-any-client says so; /metrics (budgets, costs) off loopback answers only a bearer token the
real API server accepts and lets `get /metrics` (TokenReview + SubjectAccessReview, as kube-rbac-proxy), with
the chart's own RBAC, and over TLS only; the chart keeps the controller and the webhook behind
NetworkPolicies."""

from __future__ import annotations

import ssl
import subprocess
import sys
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client

from kgwe.localcluster import gpunodes
from kgwe.localcluster.pki import write_mtls_dirs, write_pki
from kgwe.resources import deploy_dir
from tests.harness.deployed import apply_docs
from tests.harness.http_attack import client_tls, probe
from tests.harness.processes import start_kgwe, stop

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory, inventory_file: Path) -> dict[str, Path]:
    tmp = tmp_path_factory.mktemp("access")
    server, client_dir = write_mtls_dirs(tmp / "mtls")
    return {"inventory": inventory_file, "server": server, "client": client_dir, "tmp": tmp}


def refused(args: list[str], *needles: str) -> None:
    """`kgwe ARGS` exits at once with a message naming each needle, and no traceback."""
    out = subprocess.run(
        [sys.executable, "-m", "kgwe.cli", *args], capture_output=True, text=True, cwd=ROOT, timeout=60
    )
    assert out.returncode != 0, out.stderr[-2000:]
    for needle in needles:
        assert needle in out.stderr, out.stderr
    assert "Traceback" not in out.stderr


def tls_args(server: Path, ca: bool) -> list[str]:
    args = ["--tls-cert-file", str(server / "tls.crt"), "--tls-key-file", str(server / "tls.key")]
    return [*args, "--client-ca-file", str(server / "ca.crt")] if ca else args


def test_the_extender_refuses_tls_without_a_client_ca(files) -> None:
    base = ["extender", "--inventory", str(files["inventory"]), "--listen", "127.0.0.1:0"]
    refused([*base, *tls_args(files["server"], ca=False)], "--client-ca-file", "--insecure-any-client")
    proc, port = start_kgwe(
        [*base, *tls_args(files["server"], ca=False), "--insecure-any-client"],
        files["tmp"] / "ext-insecure.log",
        r"listening on 127\.0\.0\.1:(\d+)",
    )
    try:
        assert probe(port, tls=client_tls(files["server"] / "ca.crt")) == 200  # served, as asked
    finally:
        stop(proc)


def test_the_extender_refuses_plain_http_off_loopback(files) -> None:
    base = ["extender", "--inventory", str(files["inventory"])]
    refused([*base, "--listen", "0.0.0.0:0"], "plain HTTP on 0.0.0.0", "--insecure-any-client")
    refused([*base, "--listen", "[::]:0"], "plain HTTP on ::", "--insecure-any-client")
    proc, port = start_kgwe(  # served, as asked; its /metrics, plain off loopback, is not
        [*base, "--listen", "0.0.0.0:0", "--insecure-any-client"],
        files["tmp"] / "ext-plain.log",
        r"listening on 0\.0\.0\.0:(\d+)",
    )
    try:
        assert probe(port, "/metrics") == 404
    finally:
        stop(proc)


def test_the_webhook_refuses_unverified_clients_unless_told(files) -> None:
    pki = write_pki(files["tmp"] / "hook-pki")
    base = ["webhook", "--listen", "127.0.0.1:0", "--tls-cert-file", str(pki.serving_cert)]
    base += ["--tls-key-file", str(pki.serving_key)]
    refused(base, "--client-ca-file", "--insecure-any-client")


def test_the_webhook_with_a_client_ca_serves_only_certified_clients(files) -> None:
    server, client_dir = files["server"], files["client"]
    args = ["webhook", "--listen", "127.0.0.1:0", *tls_args(server, ca=True)]
    proc, port = start_kgwe(args, files["tmp"] / "hook-mtls.log", r"listening on 127\.0\.0\.1:(\d+)")
    try:
        anonymous = client_tls(server / "ca.crt")
        assert probe(port, tls=anonymous) != 200
        certified = client_tls(server / "ca.crt")
        certified.load_cert_chain(str(client_dir / "tls.crt"), str(client_dir / "tls.key"))
        assert probe(port, tls=certified) == 200
    finally:
        stop(proc)


def test_static_extender_metrics_off_loopback_need_the_flag(files) -> None:
    base = ["extender", "--inventory", str(files["inventory"]), "--listen", "127.0.0.1:0"]
    tls = ["--metrics-tls-cert-file", str(files["server"] / "tls.crt")]
    tls += ["--metrics-tls-key-file", str(files["server"] / "tls.key")]
    refused([*base, "--metrics-listen", "0.0.0.0:0", *tls], "/metrics", "--insecure-public-metrics")
    refused([*base, "--metrics-listen", "0.0.0.0:0"], "over TLS only", "--metrics-tls-cert-file")
    proc, port = start_kgwe(  # the plain probe port off loopback: health only
        [*base, "--probe-listen", "0.0.0.0:0"],
        files["tmp"] / "ext-probe.log",
        r"probes .* on 0\.0\.0\.0:(\d+)",
    )
    try:
        assert probe(port, "/healthz") == 200 and probe(port, "/metrics") == 404
    finally:
        stop(proc)
    proc, port = start_kgwe(
        [*base, "--probe-listen", "0.0.0.0:0", "--insecure-public-metrics"],
        files["tmp"] / "ext-public.log",
        r"probes .* on 0\.0\.0\.0:(\d+)",
    )
    try:
        assert probe(port, "/metrics") == 200
    finally:
        stop(proc)


# -- the chart ------------------------------------------------------------------------------------------


def test_the_chart_fences_the_controller_and_the_webhook_and_delegates_token_reviews(chart) -> None:
    objs = [d for d in yaml.safe_load_all(chart.template()) if d]
    by = {(d["kind"], d["metadata"]["name"]): d for d in objs}
    # the default: the extender is a container of each kgwe-scheduler pod, its API on their loopback
    for name, ports in (
        ("kgwe-controller", (8080, 9443)),
        ("kgwe-webhook", (8443,)),
        ("kgwe-scheduler", (8081, 9443)),
    ):
        policy = by[("NetworkPolicy", name)]["spec"]
        assert policy["policyTypes"] == ["Ingress"]
        assert [p for rule in policy["ingress"] for p in rule["ports"]] == [
            {"protocol": "TCP", "port": port} for port in ports
        ]
    delegator = by[("ClusterRoleBinding", "kgwe-auth-delegator")]
    assert delegator["roleRef"]["name"] == "system:auth-delegator"
    assert {s["name"] for s in delegator["subjects"]} == {"kgwe-controller", "kgwe-scheduler"}
    standalone = {
        (d["kind"], d["metadata"]["name"]): d
        for d in yaml.safe_load_all(chart.template("--set", "extender.mode=standalone"))
        if d
    }
    policy = standalone[("NetworkPolicy", "kgwe-extender")]["spec"]
    assert {"protocol": "TCP", "port": 8081} in [p for rule in policy["ingress"] for p in rule["ports"]]
    delegator = standalone[("ClusterRoleBinding", "kgwe-auth-delegator")]
    assert {s["name"] for s in delegator["subjects"]} == {"kgwe-controller", "kgwe-extender"}
    assert by[("ClusterRole", "kgwe-metrics-reader")]["rules"] == [
        {"nonResourceURLs": ["/metrics"], "verbs": ["get"]}
    ]
    hook = by[("Deployment", "kgwe-webhook")]["spec"]["template"]["spec"]["containers"][0]["args"]
    assert "--insecure-any-client" in hook  # the API server presents no client certificate by default
    narrowed = [
        d
        for d in yaml.safe_load_all(
            chart.template(
                "--set-json",
                'webhook.networkPolicy.from=[{"ipBlock":{"cidr":"10.0.0.0/24"}}]',
                "--set-json",
                'monitoring.metricsReaders=[{"name":"prometheus","namespace":"monitoring"}]',
            )
        )
        if d
    ]
    by = {(d["kind"], d["metadata"]["name"]): d for d in narrowed}
    assert by[("NetworkPolicy", "kgwe-webhook")]["spec"]["ingress"][0]["from"] == [
        {"ipBlock": {"cidr": "10.0.0.0/24"}}
    ]
    readers = by[("ClusterRoleBinding", "kgwe-metrics-reader")]
    assert readers["subjects"] == [
        {"kind": "ServiceAccount", "name": "prometheus", "namespace": "monitoring"}
    ]


# -- /metrics against the real API server, with deploy/'s RBAC ------------------------------------------


def deploy_rbac_docs() -> list[dict]:
    """deploy/'s ServiceAccounts and RBAC (what a token review needs), not the workloads."""
    kustomization = yaml.safe_load((deploy_dir() / "kustomization.yaml").read_text())
    docs = []
    for rel in kustomization["resources"]:
        for d in yaml.safe_load_all((deploy_dir() / rel).read_text()):
            if d and d["kind"] in ("ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Namespace"):
                docs.append(d)
    return docs


def as_service_account(api: client.ApiClient, name: str) -> client.ApiClient:
    impersonated = client.ApiClient(api.configuration)
    impersonated.set_default_header("Impersonate-User", f"system:serviceaccount:kgwe-system:{name}")
    return impersonated


@pytest.fixture(scope="module")
def tokens(k8s_api) -> Iterator[dict[str, str]]:
    """Tokens of two ServiceAccounts: one bound to the chart's kgwe-metrics-reader, one bound to nothing."""
    gpunodes.ensure_gpu_operator_objects(k8s_api)  # the agent's ServiceAccount lives there
    apply_docs(k8s_api, deploy_rbac_docs(), "metrics-access-test")
    core, rbac = client.CoreV1Api(k8s_api), client.RbacAuthorizationV1Api(k8s_api)
    ns = f"monitoring-{uuid.uuid4().hex[:6]}"
    core.create_namespace({"metadata": {"name": ns}})
    out = {}
    for sa in ("prometheus", "stranger"):
        core.create_namespaced_service_account(ns, {"metadata": {"name": sa}})
        request = {"spec": {"expirationSeconds": 3600}}
        out[sa] = core.create_namespaced_service_account_token(sa, ns, request).status.token
    binding = f"kgwe-metrics-reader-{ns}"
    rbac.create_cluster_role_binding(
        {
            "metadata": {"name": binding},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": "kgwe-metrics-reader",
            },
            "subjects": [{"kind": "ServiceAccount", "name": "prometheus", "namespace": ns}],
        }
    )
    yield out
    rbac.delete_cluster_role_binding(binding)
    core.delete_namespace(ns)


def get(port: int, path: str, token: str | None = None, ca: Path | None = None) -> int:
    """The status of GET `path`; over https, trusting `ca`, when given."""
    headers = {"Authorization": f"Bearer {token}"} if token is not None else {}
    scheme = "https" if ca is not None else "http"
    req = urllib.request.Request(f"{scheme}://127.0.0.1:{port}{path}", headers=headers)
    ctx = ssl.create_default_context(cafile=str(ca)) if ca is not None else None
    try:
        with urllib.request.urlopen(req, timeout=30, context=ctx) as resp:
            resp.read()
            return resp.status
    except urllib.error.HTTPError as err:
        return err.code


def deployed_controller(k8s_api: client.ApiClient, tmp_path: Path, **options: Any) -> Any:
    """The controller as deploy/ runs it: its ServiceAccount, listening on every address."""
    from kgwe.reconcile.controller import Controller

    return Controller(
        as_service_account(k8s_api, "kgwe-controller"),
        "kgwe-system",
        cache_dir=tmp_path,
        listen=("0.0.0.0", 0),
        leader_election=False,
        workloads=False,
        **options,
    )


@pytest.mark.cluster
def test_controller_metrics_off_loopback_are_not_served_in_clear(k8s_api, tokens, tmp_path) -> None:
    """The controller as deploy/ runs it (its ServiceAccount, listening on every address): its plain port
    answers /metrics for no token (over TLS instead: tests/security/test_metrics_tls.py)."""
    controller = deployed_controller(k8s_api, tmp_path)
    assert controller.server is not None
    controller.server.start()
    try:
        port = controller.server.port
        assert get(port, "/healthz") == 200  # probes need nothing
        assert get(port, "/metrics") == 404
        assert get(port, "/metrics", tokens["prometheus"]) == 404
    finally:
        controller.server.stop()


@pytest.mark.cluster
def test_extender_metrics_off_loopback_need_an_allowed_token(control_plane, tokens, tmp_path) -> None:
    args = ["extender", "--kubeconfig", str(control_plane.kubeconfig_path), "--listen", "127.0.0.1:0"]
    server, _ = write_mtls_dirs(tmp_path / "tls")
    args += ["--metrics-listen", "0.0.0.0:0", "--metrics-tls-cert-file", str(server / "tls.crt")]
    args += ["--metrics-tls-key-file", str(server / "tls.key")]
    proc, port = start_kgwe(args, tmp_path / "extender.log", r"/metrics on 0\.0\.0\.0:(\d+)")
    try:
        ca = server / "ca.crt"
        assert get(port, "/metrics", ca=ca) == 401
        assert get(port, "/metrics", tokens["stranger"], ca=ca) == 403
        assert get(port, "/metrics", tokens["prometheus"], ca=ca) == 200
    finally:
        stop(proc)
