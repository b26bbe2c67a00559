"""The cluster DNS add-on of the local cluster: CoreDNS on the real node behind the `kube-dns` Service.

The objects are the ones kubeadm installs (ServiceAccount, ClusterRole `system:coredns`, the `coredns`
ConfigMap with its Corefile, a Deployment, the `kube-dns` Service at a fixed ClusterIP that the kubelet's
`clusterDNS` names), with a production pod: non-root, no capabilities (containerd lets pods bind ports below
1024), read-only root filesystem, liveness and readiness probes. `dns_objects` is pure; `install_cluster_dns`
creates them and waits until the Service answers through a ready endpoint.
"""

from __future__ import annotations

import time
from typing import Any

from kubernetes import client, utils

from kgwe.localcluster.controlplane import CLUSTER_DNS_IP, CLUSTER_DOMAIN, ControlPlaneError
from kgwe.runtime.errors import is_conflict

NAMESPACE = "kube-system"
NAME = "coredns"
SERVICE = "kube-dns"
APP_LABEL = {"k8s-app": "kube-dns"}

COREFILE = f"""\
.:53 {{
    errors
    health {{
        lameduck 5s
    }}
    ready
    kubernetes {CLUSTER_DOMAIN} in-addr.arpa ip6.arpa {{
        pods insecure
        fallthrough in-addr.arpa ip6.arpa
        ttl 30
    }}
    prometheus :9153
    forward . /etc/resolv.conf {{
        max_concurrent 1000
    }}
    cache 30
    loop
    reload
    loadbalance
}}
"""


def dns_objects(image: str) -> list[dict[str, Any]]:
    """The add-on's objects, CoreDNS running from `image` (imported, never pulled)."""
    meta = {"name": NAME, "namespace": NAMESPACE}
    container = {
        "name": "coredns",
        "image": image,
        "imagePullPolicy": "IfNotPresent",
        "args": ["-conf", "/etc/coredns/Corefile"],
        "ports": [
            {"name": "dns", "containerPort": 53, "protocol": "UDP"},
            {"name": "dns-tcp", "containerPort": 53, "protocol": "TCP"},
            {"name": "metrics", "containerPort": 9153, "protocol": "TCP"},
        ],
        "resources": {"requests": {"cpu": "100m", "memory": "70Mi"}, "limits": {"memory": "170Mi"}},
        "securityContext": {
            "allowPrivilegeEscalation": False,
            "capabilities": {"drop": ["ALL"]},
            "readOnlyRootFilesystem": True,
        },
        "livenessProbe": {
            "httpGet": {"path": "/health", "port": 8080},
            "initialDelaySeconds": 10,
            "timeoutSeconds": 5,
            "failureThreshold": 5,
        },
        "readinessProbe": {"httpGet": {"path": "/ready", "port": 8181}, "periodSeconds": 1},
        "volumeMounts": [{"name": "config-volume", "mountPath": "/etc/coredns", "readOnly": True}],
    }
    return [
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": meta},
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRole",
            "metadata": {"name": "system:coredns"},
            "rules": [
                {
                    "apiGroups": [""],
                    "resources": ["endpoints", "services", "pods", "namespaces"],
                    "verbs": ["list", "watch"],
                },
                {
                    "apiGroups": ["discovery.k8s.io"],
                    "resources": ["endpointslices"],
                    "verbs": ["list", "watch"],
                },
            ],
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding",
            "metadata": {"name": "system:coredns"},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": "system:coredns",
            },
            "subjects": [{"kind": "ServiceAccount", "name": NAME, "namespace": NAMESPACE}],
        },
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta, "data": {"Corefile": COREFILE}},
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {**meta, "labels": APP_LABEL},
            "spec": {
                "replicas": 1,
                "selector": {"matchLabels": APP_LABEL},
                "template": {
                    "metadata": {"labels": APP_LABEL},
                    "spec": {
                        "serviceAccountName": NAME,
                        "priorityClassName": "system-cluster-critical",
                        "dnsPolicy": "Default",  # the host's resolvers: CoreDNS must not ask itself
                        "nodeSelector": {"kubernetes.io/os": "linux"},
                        "tolerations": [{"key": "CriticalAddonsOnly", "operator": "Exists"}],
                        "securityContext": {
                            "runAsNonRoot": True,
                            "runAsUser": 65532,
                            "runAsGroup": 65532,
                            "seccompProfile": {"type": "RuntimeDefault"},
                        },
                        "containers": [container],
                        "volumes": [
                            {
                                "name": "config-volume",
                                "configMap": {
                                    "name": NAME,
                                    "items": [{"key": "Corefile", "path": "Corefile"}],
                                },
                            }
                        ],
                    },
                },
            },
        },
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": SERVICE, "namespace": NAMESPACE, "labels": APP_LABEL},
            "spec": {
                "selector": APP_LABEL,
                "clusterIP": CLUSTER_DNS_IP,
                "ports": [
                    {"name": "dns", "port": 53, "protocol": "UDP", "targetPort": 53},
                    {"name": "dns-tcp", "port": 53, "protocol": "TCP", "targetPort": 53},
                    {"name": "metrics", "port": 9153, "protocol": "TCP", "targetPort": 9153},
                ],
            },
        },
    ]


def _ready_endpoints(api: client.ApiClient) -> int:
    slices = client.DiscoveryV1Api(api).list_namespaced_endpoint_slice(
        NAMESPACE, label_selector=f"kubernetes.io/service-name={SERVICE}"
    )
    return sum(
        1 for s in slices.items for e in s.endpoints or [] if e.conditions is not None and e.conditions.ready
    )


def install_cluster_dns(api: client.ApiClient, image: str, timeout_seconds: float = 90.0) -> None:
    """Create the add-on and wait until `kube-dns` has a ready endpoint."""
    for obj in dns_objects(image):
        try:
            utils.create_from_dict(api, obj)
        except utils.FailToCreateError as exc:
            if not all(is_conflict(e) for e in exc.api_exceptions):
                raise ControlPlaneError(f"cannot create the DNS add-on's {obj['kind']}: {exc}") from None
    deadline = time.monotonic() + timeout_seconds
    while _ready_endpoints(api) == 0:
        if time.monotonic() > deadline:
            raise ControlPlaneError(f"CoreDNS not ready after {timeout_seconds:.0f}s: {_pod_state(api)}")
        time.sleep(0.25)


def _pod_state(api: client.ApiClient) -> str:
    """What the CoreDNS pod is doing (phase, waiting reasons, last events), for the error message."""
    core = client.CoreV1Api(api)
    pods = core.list_namespaced_pod(NAMESPACE, label_selector="k8s-app=kube-dns").items
    if not pods:
        return "no pod created (see kube-controller-manager's log)"
    pod = pods[0]
    waiting = [
        f"{s.name}: {s.state.waiting.reason} {s.state.waiting.message or ''}".strip()
        for s in (pod.status.container_statuses or [])
        if s.state and s.state.waiting
    ]
    events = core.list_namespaced_event(
        NAMESPACE, field_selector=f"involvedObject.name={pod.metadata.name}"
    ).items
    said = "; ".join(f"{e.reason}: {e.message}" for e in events[-3:])
    where = f"pod {pod.metadata.name} {pod.status.phase} on {pod.spec.node_name}"
    return f"{where}; {'; '.join(waiting)}; events: {said}"
