"""Kueue v0.17.0 beside a test control plane, installed the way its own manifests install it.

The manager is the binary `hack/tool-bins.sh kueue` builds from the Go module proxy; its CRDs, conversion
patches, webhook configurations and shipped Configuration come from the same release's files in the Go
module cache, with what Kueue's kustomization does to them (the `kueue-` name prefix, the `kueue-system`
namespace). Kueue manages its own certificates as in production (internal cert management: it writes the
Secret `kueue-webhook-server-cert` and injects its CA into the webhook configurations and CRDs); its
webhook Service `kueue-webhook-service` reaches the manager on this host through an EndpointSlice, which
the API server follows with `--enable-aggregator-routing` (`CONTROL_PLANE_ARGS`). The Configuration it runs
is also in the ConfigMap `kueue-system/kueue-manager-config`, where an installed Kueue keeps it and KGWE
reads it. Left out: leader election, metrics, the visibility API server.
"""

from __future__ import annotations

import base64
import copy
import secrets
import threading
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import yaml
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from kgwe.cluster.client import ensure_namespace
from kgwe.localcluster.controlplane import ControlPlane, free_port, host_ip, tail
from kgwe.localcluster.gotools import tool_dir
from kgwe.resources import hack_dir
from kgwe.vocab import KUEUE_CONFIG_KEY, KUEUE_CONFIGMAP, KUEUE_NAMESPACE
from tests.harness.gocontrollers import ControllerProcess, module_dir, pinned_version
from tests.harness.waiting import wait_for

MODULE = "sigs.k8s.io/kueue"
WRAPPER_GO_MOD = hack_dir() / "kueue" / "go.mod"
CONTROL_PLANE_ARGS = ("--enable-aggregator-routing=true",)  # a webhook Service reaches a host process
PREFIX = "kueue-"  # config/default's namePrefix
SERVICE = PREFIX + "webhook-service"
SECRET = PREFIX + "webhook-server-cert"
WEBHOOK_CONFIGURATIONS = (
    PREFIX + "mutating-webhook-configuration",
    PREFIX + "validating-webhook-configuration",
)
API = ("kueue.x-k8s.io", "v1beta2")
_SHIPPED_CONFIG = "config/components/manager/controller_manager_config.yaml"


def release_dir() -> Path:
    return module_dir(MODULE, pinned_version(WRAPPER_GO_MOD, MODULE))


def _load(path: Path) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


def crds(release: Path) -> list[dict[str, Any]]:
    """The CRDs as config/components/crd's kustomization makes them: its conversion patches applied."""
    base = release / "config/components/crd"
    kustomization = yaml.safe_load((base / "kustomization.yaml").read_text())
    by_name = {d["metadata"]["name"]: d for rel in kustomization["resources"] for d in _load(base / rel)}
    for patch in kustomization.get("patches") or []:
        (doc,) = _load(base / patch["path"])
        webhook = copy.deepcopy(doc["spec"]["conversion"])
        webhook["webhook"]["clientConfig"]["service"] = {
            "name": SERVICE,
            "namespace": KUEUE_NAMESPACE,
            "path": webhook["webhook"]["clientConfig"]["service"]["path"],
            "port": 443,
        }
        by_name[doc["metadata"]["name"]]["spec"]["conversion"] = webhook
    return list(by_name.values())


def webhook_configurations(release: Path, selector: dict[str, Any]) -> list[dict[str, Any]]:
    """Kueue's mutating and validating webhook configurations, pointed at its Service, asking the API server
    only about objects in the namespaces Kueue manages (as Kueue's Helm chart scopes them)."""
    out = []
    for doc in _load(release / "config/components/webhook/manifests.yaml"):
        doc = copy.deepcopy(doc)
        doc["metadata"] = {"name": PREFIX + doc["metadata"]["name"]}
        for hook in doc["webhooks"]:
            hook["clientConfig"]["service"].update(name=SERVICE, namespace=KUEUE_NAMESPACE, port=443)
            hook["namespaceSelector"] = selector
        out.append(doc)
    return out


def shipped_configuration(release: Path) -> dict[str, Any]:
    """The Configuration Kueue's manifests install (its frameworks are Kueue's defaults as shipped)."""
    return dict(yaml.safe_load((release / _SHIPPED_CONFIG).read_text()))


class Kueue:
    """A running Kueue manager; `configure(**changes)` restarts it with a changed Configuration (top-level
    keys such as manageJobsWithoutQueueName, integrations)."""

    def __init__(self, cp: ControlPlane, workdir: Path) -> None:
        self.cp, self.workdir = cp, workdir
        self.api = cp.api_client()
        self.release = release_dir()
        self.binary = tool_dir("kueue") / "kueue"
        self.process = ControllerProcess("kueue", workdir / "kueue.log")
        self.webhook_port = free_port()
        self.host = host_ip()
        self.config: dict[str, Any] = {}
        self._installed = False

    @property
    def selector(self) -> dict[str, Any]:
        return self.config["managedJobsNamespaceSelector"]

    def _install(self) -> None:
        """What Kueue's manifests create, once: namespace, Secret, Service and its EndpointSlice, CRDs."""
        ensure_namespace(self.api, KUEUE_NAMESPACE)
        core = client.CoreV1Api(self.api)
        _create(lambda: core.create_namespaced_secret(KUEUE_NAMESPACE, {"metadata": {"name": SECRET}}))
        port = {"name": "https", "port": 443, "protocol": "TCP", "targetPort": self.webhook_port}
        service = {"metadata": {"name": SERVICE}, "spec": {"ports": [port]}}  # no selector: the slice below
        _create(lambda: core.create_namespaced_service(KUEUE_NAMESPACE, service))
        endpoints = {
            "metadata": {"name": SERVICE, "labels": {"kubernetes.io/service-name": SERVICE}},
            "addressType": "IPv4",
            "endpoints": [{"addresses": [self.host], "conditions": {"ready": True}}],
            "ports": [{"name": "https", "port": self.webhook_port, "protocol": "TCP"}],
        }
        _create(
            lambda: client.DiscoveryV1Api(self.api).create_namespaced_endpoint_slice(
                KUEUE_NAMESPACE, endpoints
            )
        )
        extensions = client.ApiextensionsV1Api(self.api)
        for crd in crds(self.release):
            _create(lambda crd=crd: extensions.create_custom_resource_definition(crd))
        self._installed = True

    def configure(self, **changes: Any) -> Kueue:
        """(Re)start Kueue with the shipped Configuration plus `changes`; the webhook configurations and
        the ConfigMap follow it."""
        self.process.stop()
        if not self._installed:
            self._install()
        config = shipped_configuration(self.release)
        config.update(
            namespace=KUEUE_NAMESPACE,
            health={"healthProbeBindAddress": f"127.0.0.1:{free_port()}"},
            metrics={"bindAddress": "0"},
            webhook={"port": self.webhook_port, "host": self.host, "certDir": str(self.workdir / "certs")},
            leaderElection={"leaderElect": False},
            internalCertManagement={
                "enable": True,
                "webhookServiceName": SERVICE,
                "webhookSecretName": SECRET,
            },
            clientConnection={"qps": 100, "burst": 200},
            managedJobsNamespaceSelector={
                "matchExpressions": [
                    {
                        "key": "kubernetes.io/metadata.name",
                        "operator": "NotIn",
                        "values": ["kube-system", KUEUE_NAMESPACE],
                    }
                ]
            },
        )
        config.update(changes)
        self.config = config
        text = yaml.safe_dump(config, sort_keys=False)
        path = self.workdir / "controller_manager_config.yaml"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        _apply_config_map(self.api, text)
        admission = client.AdmissionregistrationV1Api(self.api)
        for doc in webhook_configurations(self.release, self.selector):
            name = doc["metadata"]["name"]
            kind = "mutating" if doc["kind"] == "MutatingWebhookConfiguration" else "validating"
            calls = [
                getattr(admission, f"{verb}_{kind}_webhook_configuration")
                for verb in ("create", "read", "replace")
            ]
            _create_or_replace(*calls, name, doc)
        health = config["health"]["healthProbeBindAddress"]
        argv = [str(self.binary), f"--config={path}", "--feature-gates=VisibilityOnDemand=false"]
        env = {"KUBECONFIG": str(self.cp.kubeconfig_path)}
        mounted = threading.Event()
        mounting = threading.Thread(target=self._mount_secret, args=(mounted,), daemon=True)
        mounting.start()
        try:
            self.process.start(argv, env, f"http://{health}/readyz", timeout_seconds=180)
        finally:
            mounted.set()
            mounting.join(timeout=10)
        self._wait_webhooks_served()
        return self

    def _mount_secret(self, stop: threading.Event) -> None:
        """Play the kubelet's Secret volume: Kueue writes its certificates into its Secret and waits until
        they appear in its certDir, as they would in its pod."""
        certs = self.workdir / "certs"
        certs.mkdir(parents=True, exist_ok=True)
        core = client.CoreV1Api(self.api)
        while not stop.wait(0.5):
            try:
                data = core.read_namespaced_secret(SECRET, KUEUE_NAMESPACE).data or {}
            except ApiException:
                continue
            for key in ("tls.crt", "tls.key", "ca.crt"):
                if key in data:
                    target = certs / key
                    value = base64.b64decode(data[key])
                    if not target.exists() or target.read_bytes() != value:
                        target.write_bytes(value)

    def _wait_webhooks_served(self) -> None:
        """Kueue is ready once its CA is in every webhook configuration and its webhook answers: a dry-run
        ResourceFlavor goes through both."""
        custom = client.CustomObjectsApi(self.api)
        flavor = {
            "apiVersion": "/".join(API),
            "kind": "ResourceFlavor",
            "metadata": {"name": f"probe-{secrets.token_hex(3)}"},
        }

        def answered() -> bool:
            try:
                custom.create_cluster_custom_object(*API, "resourceflavors", flavor, dry_run="All")
            except ApiException:
                return False
            return True

        wait_for(
            "Kueue's webhooks answering", answered, 120, describe=lambda: tail(self.process.log_path, 40)
        )

    def stop(self) -> None:
        self.process.stop()


def _create(call: Any) -> None:
    try:
        call()
    except ApiException as exc:
        if exc.status != 409:
            raise


def _create_or_replace(create: Any, read: Any, replace: Any, name: str, doc: dict[str, Any]) -> None:
    try:
        create(doc)
    except ApiException as exc:
        if exc.status != 409:
            raise
        doc = {
            **doc,
            "metadata": {**doc["metadata"], "resourceVersion": read(name).metadata.resource_version},
        }
        replace(name, doc)  # Kueue injects its CA again when it starts


def _apply_config_map(api: client.ApiClient, text: str) -> None:
    core = client.CoreV1Api(api)
    body = {"metadata": {"name": KUEUE_CONFIGMAP}, "data": {KUEUE_CONFIG_KEY: text}}
    try:
        core.create_namespaced_config_map(KUEUE_NAMESPACE, body)
    except ApiException as exc:
        if exc.status != 409:
            raise
        core.replace_namespaced_config_map(KUEUE_CONFIGMAP, KUEUE_NAMESPACE, body)


# ---- a queue to submit to -----------------------------------------------------------------------------
def queues(
    api: client.ApiClient,
    namespace: str,
    *,
    cluster_queue: str,
    local_queues: Iterable[str],
    gpus: int,
    flavor: str = "gpu-flavor",
    resources: Sequence[str] = ("cpu", "memory", "nvidia.com/gpu"),
) -> None:
    """A ResourceFlavor, a ClusterQueue with `gpus` nvidia.com/gpu (and ample CPU and memory) and LocalQueues
    in `namespace` pointing at it."""
    custom = client.CustomObjectsApi(api)
    _create(
        lambda: custom.create_cluster_custom_object(
            *API, "resourceflavors", _kind("ResourceFlavor", flavor, {})
        )
    )
    quota = {"cpu": "1000", "memory": "10Ti", "nvidia.com/gpu": str(gpus)}
    spec = {
        "namespaceSelector": {},
        "resourceGroups": [
            {
                "coveredResources": list(resources),
                "flavors": [
                    {"name": flavor, "resources": [{"name": r, "nominalQuota": quota[r]} for r in resources]}
                ],
            }
        ],
    }
    _create(
        lambda: custom.create_cluster_custom_object(
            *API, "clusterqueues", _kind("ClusterQueue", cluster_queue, spec)
        )
    )
    names = list(local_queues)
    for name in names:
        body = _kind("LocalQueue", name, {"clusterQueue": cluster_queue})
        _create(
            lambda body=body: custom.create_namespaced_custom_object(*API, namespace, "localqueues", body)
        )

    def active() -> bool:  # Kueue queues (and gives pods a `default` queue) only through an active queue
        items = custom.list_namespaced_custom_object(*API, namespace, "localqueues")["items"]
        ready = {q["metadata"]["name"] for q in items if _condition_true(q, "Active")}
        return set(names) <= ready

    wait_for(f"LocalQueues {', '.join(names)} active", active, 60)


def _condition_true(obj: dict[str, Any], ctype: str) -> bool:
    conditions = (obj.get("status") or {}).get("conditions") or []
    return any(c.get("type") == ctype and c.get("status") == "True" for c in conditions)


def _kind(kind: str, name: str, spec: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": "/".join(API), "kind": kind, "metadata": {"name": name}, "spec": spec}


def workload(api: client.ApiClient, namespace: str, name: str) -> dict[str, Any] | None:
    try:
        return dict(
            client.CustomObjectsApi(api).get_namespaced_custom_object(*API, namespace, "workloads", name)
        )
    except ApiException as exc:
        if exc.status == 404:
            return None
        raise
