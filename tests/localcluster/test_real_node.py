"""The host's real node: pods run as in production (non-root, read-only root filesystem, configMap, secret,
emptyDir and projected volumes, probes, hostPort), resolve Service names through the cluster DNS, are
reached from the host through ClusterIPs, and answer `kubectl logs` and `exec` through the apiserver; the
kubelet has a node identity of its own."""

from __future__ import annotations

import secrets
import time
import urllib.error
import urllib.request
from typing import Any

import pytest
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException
from kubernetes.stream import stream

from kgwe.localcluster import gpunodes
from kgwe.localcluster.controlplane import CLUSTER_DNS_IP, ControlPlane, free_port
from kgwe.localcluster.realnode import NODE_NAME, POD_SUBNET
from tests.harness.pods import wait_for
from tests.harness.realnode import PodImage

NONROOT = 65532
SECRET_TOKEN = "s3cret-" + secrets.token_hex(4)


def _restricted_security() -> dict[str, Any]:
    return {
        "readOnlyRootFilesystem": True,
        "allowPrivilegeEscalation": False,
        "capabilities": {"drop": ["ALL"]},
    }


def _pod_security() -> dict[str, Any]:
    return {
        "runAsNonRoot": True,
        "runAsUser": NONROOT,
        "runAsGroup": NONROOT,
        "seccompProfile": {"type": "RuntimeDefault"},
    }


def _web(core: client.CoreV1Api, namespace: str, image: PodImage, host_port: int) -> None:
    """A web server pod serving what it finds in its volumes (copied to its emptyDir at start), and its
    Service."""
    core.create_namespaced_config_map(
        namespace, {"metadata": {"name": "web"}, "data": {"index.html": f"hello from {namespace}\n"}}
    )
    core.create_namespaced_secret(
        namespace, {"metadata": {"name": "web"}, "stringData": {"token": SECRET_TOKEN}}
    )
    script = (
        "cp /config/index.html /scratch/; cat /secret/token > /scratch/token; id -u > /scratch/uid; "
        "wc -c < /var/run/secrets/kubernetes.io/serviceaccount/token > /scratch/sa-token-bytes; "
        "if touch /written-to-root 2> /scratch/rootfs; then echo writable > /scratch/rootfs; fi; "
        "exec httpd -f -v -p 8080 -h /scratch"
    )
    core.create_namespaced_pod(
        namespace,
        {
            "metadata": {"name": "web", "labels": {"app": "web"}},
            "spec": {
                "securityContext": _pod_security(),
                "containers": [
                    {
                        "name": "web",
                        "image": image.reference,
                        "imagePullPolicy": "Never",  # nothing may be pulled: it was imported
                        "command": ["sh", "-c", script],
                        "ports": [{"containerPort": 8080, "hostPort": host_port}],
                        "readinessProbe": {"httpGet": {"path": "/uid", "port": 8080}, "periodSeconds": 1},
                        "livenessProbe": {"exec": {"command": ["cat", "/scratch/uid"]}, "periodSeconds": 5},
                        "securityContext": _restricted_security(),
                        "volumeMounts": [
                            {"name": "config", "mountPath": "/config", "readOnly": True},
                            {"name": "secret", "mountPath": "/secret", "readOnly": True},
                            {"name": "scratch", "mountPath": "/scratch"},
                        ],
                    }
                ],
                "volumes": [
                    {"name": "config", "configMap": {"name": "web"}},
                    {"name": "secret", "secret": {"secretName": "web"}},
                    {"name": "scratch", "emptyDir": {}},
                ],
            },
        },
    )
    core.create_namespaced_service(
        namespace,
        {
            "metadata": {"name": "web"},
            "spec": {"selector": {"app": "web"}, "ports": [{"port": 80, "targetPort": 8080}]},
        },
    )

    def ready() -> bool:
        pod = core.read_namespaced_pod("web", namespace)
        return any(c.type == "Ready" and c.status == "True" for c in pod.status.conditions or [])

    wait_for("the web pod to be Ready (readiness probe through the kubelet)", ready, timeout_s=120)


def _run(core: client.CoreV1Api, namespace: str, image: PodImage, name: str, script: str) -> tuple[str, str]:
    """Run `script` in a busybox pod to completion; (phase, its log)."""
    core.create_namespaced_pod(
        namespace,
        {
            "metadata": {"name": name},
            "spec": {
                "restartPolicy": "Never",
                "securityContext": _pod_security(),
                "containers": [
                    {
                        "name": name,
                        "image": image.reference,
                        "imagePullPolicy": "IfNotPresent",
                        "command": ["sh", "-c", script],
                        "securityContext": _restricted_security(),
                    }
                ],
            },
        },
    )
    wait_for(
        f"pod {name} to finish",
        lambda: core.read_namespaced_pod(name, namespace).status.phase in ("Succeeded", "Failed"),
        timeout_s=120,
    )
    return core.read_namespaced_pod(name, namespace).status.phase, core.read_namespaced_pod_log(
        name, namespace
    )


def _get(url: str, wait_seconds: float = 30) -> str:
    """GET `url`; a refused connection is retried for a while: kube-proxy programs a new Service's rules
    a moment after its endpoint turns ready (until then its rules reject the connection)."""
    deadline = time.monotonic() + wait_seconds
    while True:
        try:
            with urllib.request.urlopen(url, timeout=10) as resp:
                return str(resp.read().decode())
        except urllib.error.URLError as exc:
            if not isinstance(exc.reason, ConnectionRefusedError) or time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def test_the_node_is_ready_and_the_kubelet_is_a_node(real_node_cluster: ControlPlane) -> None:
    cp = real_node_cluster
    api = cp.api_client()
    core = client.CoreV1Api(api)
    node = core.read_node(NODE_NAME)
    assert any(c.type == "Ready" and c.status == "True" for c in node.status.conditions)
    assert node.status.node_info.kubelet_version == cp.binaries.kubernetes_version
    assert node.status.node_info.container_runtime_version.startswith("containerd://")
    assert {a.type: a.address for a in node.status.addresses}["InternalIP"] == cp.node_ip
    assert not [k for k in node.metadata.labels if k.startswith("nvidia.com/")], (
        "no GPU labels on the real node"
    )
    # The kubelet's own credentials (system:node:kgwe-node): its node yes, another node no (Node authorizer
    # and NodeRestriction).
    kubelet = client.CoreV1Api(config.new_client_from_config(str(cp.node.workdir / "kubelet.kubeconfig")))
    kubelet.patch_node(NODE_NAME, {"metadata": {"annotations": {"kgwe.test/touched": "yes"}}})
    other = f"other-{secrets.token_hex(3)}"
    gpunodes.create_gpu_node(api, other, "DGX-H100")
    try:
        with pytest.raises(ApiException) as denied:
            kubelet.patch_node(other, {"metadata": {"annotations": {"kgwe.test/touched": "yes"}}})
        assert denied.value.status == 403
    finally:
        gpunodes.delete_nodes(api, [other])


def test_a_production_pod_runs_and_the_host_reaches_it(
    real_node_cluster: ControlPlane, real_node_namespace: str, busybox: PodImage
) -> None:
    cp = real_node_cluster
    core = client.CoreV1Api(cp.api_client())
    host_port = free_port()
    _web(core, real_node_namespace, busybox, host_port)
    pod = core.read_namespaced_pod("web", real_node_namespace)
    assert pod.spec.node_name == NODE_NAME
    assert pod.status.pod_ip.startswith(POD_SUBNET.rsplit(".", 2)[0] + ".")
    cluster_ip = core.read_namespaced_service("web", real_node_namespace).spec.cluster_ip
    # host -> ClusterIP (kube-proxy's nftables rules): what the apiserver does to reach a webhook pod
    assert _get(f"http://{cluster_ip}/index.html") == f"hello from {real_node_namespace}\n"  # configMap
    assert _get(f"http://{cluster_ip}/token") == SECRET_TOKEN  # secret
    assert _get(f"http://{cluster_ip}/uid").strip() == str(NONROOT)
    assert int(_get(f"http://{cluster_ip}/sa-token-bytes")) > 100  # projected service-account token
    assert "Read-only file system" in _get(f"http://{cluster_ip}/rootfs")
    # host -> the node's hostPort (the portmap plugin)
    assert _get(f"http://{cp.node_ip}:{host_port}/index.html") == f"hello from {real_node_namespace}\n"


def test_pods_resolve_service_names_through_the_cluster_dns(
    real_node_cluster: ControlPlane, real_node_namespace: str, busybox: PodImage
) -> None:
    core = client.CoreV1Api(real_node_cluster.api_client())
    _web(core, real_node_namespace, busybox, free_port())
    cluster_ip = core.read_namespaced_service("web", real_node_namespace).spec.cluster_ip
    fqdn = f"web.{real_node_namespace}.svc.cluster.local"
    phase, log = _run(
        core,
        real_node_namespace,
        busybox,
        "client",
        f"cat /etc/resolv.conf; nslookup {fqdn}; wget -q -O- http://{fqdn}/index.html; "
        "wget -q -O- http://web/uid; nslookup kubernetes.default.svc.cluster.local",
    )
    assert phase == "Succeeded", log
    assert f"nameserver {CLUSTER_DNS_IP}" in log
    assert f"Address: {cluster_ip}" in log
    assert f"hello from {real_node_namespace}" in log
    assert str(NONROOT) in log
    assert "Address: 10.96.0.1" in log  # the apiserver's Service, through the same DNS


def test_logs_and_exec_go_through_the_apiserver_to_the_kubelet(
    real_node_cluster: ControlPlane, real_node_namespace: str, busybox: PodImage
) -> None:
    core = client.CoreV1Api(real_node_cluster.api_client())
    marker = f"line-{secrets.token_hex(4)}"
    phase, log = _run(core, real_node_namespace, busybox, "talker", f"echo {marker}; echo done >&2")
    assert phase == "Succeeded"
    assert sorted(log.splitlines()) == sorted([marker, "done"])  # stdout and stderr, in either order
    _web(core, real_node_namespace, busybox, free_port())
    answer = stream(
        core.connect_get_namespaced_pod_exec,
        "web",
        real_node_namespace,
        command=["cat", "/scratch/uid"],
        stderr=True,
        stdin=False,
        stdout=True,
        tty=False,
    )
    assert answer.strip() == str(NONROOT)
    deadline = time.monotonic() + 30
    while "response:200" not in core.read_namespaced_pod_log(
        "web", real_node_namespace
    ):  # the probes' requests
        assert time.monotonic() < deadline, "httpd's request log never showed the readiness probe"
        time.sleep(0.5)
