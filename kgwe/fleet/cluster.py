"""The cluster side of the fleet commands: connecting as kubectl does (kubeconfig or in-cluster,
`--context`, `-n`), the reads they share, and one translation of API failures into one-line errors
(unreachable API server, missing CRD, refused access). The kubernetes client is imported only here, and
only when a command connects."""

from __future__ import annotations

import argparse
import contextlib
import os
from collections import defaultdict
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kgwe.errors import KgweError
from kgwe.fleet.output import FORMATS
from kgwe.vocab import (
    API_GROUP,
    BUDGET_QUOTA_NAME,
    COMPONENT_SELECTOR,
    CRD_VERSION,
    DEVICE_PLUGIN_DAEMONSET,
    GPU_NODE_SELECTOR,
    GPU_OPERATOR_NAMESPACE,
    GPU_WORKLOAD_PLURAL,
    POLICY_REPOSITORY_PLURAL,
)

if TYPE_CHECKING:  # the kubernetes client is imported when a command connects
    from kubernetes.client.exceptions import ApiException

REQUEST_TIMEOUT_SECONDS = 30.0
SERVICE_ACCOUNT_NAMESPACE = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"


def add_cluster_arguments(parser: argparse.ArgumentParser, *, all_namespaces: bool = False) -> None:
    group = parser.add_argument_group("cluster")
    group.add_argument(
        "--kubeconfig", help="kubeconfig file (default: $KUBECONFIG, in-cluster, ~/.kube/config)"
    )
    group.add_argument("--context", help="kubeconfig context to use (default: the current context)")
    group.add_argument("-n", "--namespace", help="namespace (default: the context's namespace, else default)")
    if all_namespaces:
        group.add_argument("-A", "--all-namespaces", action="store_true", help="every namespace")


def add_output_argument(parser: argparse.ArgumentParser, formats: tuple[str, ...] = FORMATS) -> None:
    parser.add_argument(
        "-o", "--output", choices=formats, default="table", help="output format (default: table)"
    )


def _context_namespace(kubeconfig: str | None, context: str | None) -> str | None:
    from kubernetes import config

    path = kubeconfig or os.environ.get("KUBECONFIG")
    if not path and os.environ.get("KUBERNETES_SERVICE_HOST"):
        with contextlib.suppress(OSError):
            return Path(SERVICE_ACCOUNT_NAMESPACE).read_text().strip() or None
        return None
    try:
        contexts, active = config.list_kube_config_contexts(config_file=path or None)
    except Exception:  # api_client already said what is wrong with the file
        return None
    chosen = next((c for c in contexts if c.get("name") == context), None) if context else active
    return ((chosen or {}).get("context") or {}).get("namespace")


class Fleet:
    """An authenticated connection plus the namespace the command works in."""

    def __init__(self, args: argparse.Namespace) -> None:
        from kgwe.cluster.client import api_client

        kubeconfig, context = getattr(args, "kubeconfig", None), getattr(args, "context", None)
        self.api = api_client(kubeconfig, context=context, request_timeout_s=REQUEST_TIMEOUT_SECONDS)
        self.host = self.api.configuration.host
        self.namespace: str = (
            getattr(args, "namespace", None) or _context_namespace(kubeconfig, context) or "default"
        )

    @contextlib.contextmanager
    def reading(self, what: str, crd: str | None = None) -> Iterator[None]:
        """Turn a failed call into one line: what could not be done and why."""
        import urllib3
        from kubernetes.client.exceptions import ApiException

        from kgwe.runtime.errors import is_not_found

        try:
            yield
        except ApiException as exc:
            if is_not_found(exc) and crd:
                raise KgweError(
                    f"the {crd} CRD is not installed on the cluster at {self.host} "
                    "(install KGWE's CRDs: deploy/crds/ or the Helm chart)"
                ) from None
            if exc.status in (401, 403):
                raise KgweError(
                    f"the Kubernetes API at {self.host} refused to {what}: {exc.status} {exc.reason}"
                ) from None
            raise KgweError(f"cannot {what}: {exc.status} {exc.reason}: {_api_message(exc)}") from None
        except urllib3.exceptions.HTTPError as exc:
            reason = getattr(exc, "reason", None) or exc
            raise KgweError(f"cannot reach the Kubernetes API at {self.host}: {reason}") from None

    # ---- reads ---------------------------------------------------------------------------------------
    def gpu_nodes(self) -> list[dict[str, Any]]:
        from kubernetes import client

        from kgwe.cluster.client import list_items

        with self.reading("list nodes"):
            return list_items(client.CoreV1Api(self.api).list_node, label_selector=GPU_NODE_SELECTOR)

    def gpu_pods(self) -> tuple[dict[str, dict[str, int]], dict[str, list[str]]]:
        """Per node: GPU resources requested by its live pods, and those pods (namespace/name)."""
        from kubernetes import client

        from kgwe.cluster.nodes import gpu_pods_by_node, pod_gpu_requests

        with self.reading("list pods"):
            by_node = gpu_pods_by_node(client.CoreV1Api(self.api))
        return requests_by_node(by_node, pod_gpu_requests)

    def device_plugins(self) -> dict[str, str]:
        """node -> the state of NVIDIA's device-plugin pod on it (the GPU Operator's DaemonSet, in its
        namespace); {} where there is none or it may not be read."""
        from kubernetes import client
        from kubernetes.client.exceptions import ApiException

        from kgwe.cluster.client import list_items
        from kgwe.fleet.nodes import device_plugin_states

        try:
            pods = list_items(
                client.CoreV1Api(self.api).list_namespaced_pod,
                namespace=GPU_OPERATOR_NAMESPACE,
                label_selector=f"app={DEVICE_PLUGIN_DAEMONSET}",
            )
        except ApiException:  # no such namespace, or not ours to read: nothing to show
            return {}
        return device_plugin_states(pods)

    def workloads(self, namespace: str | None) -> list[dict[str, Any]]:
        from kubernetes import client

        from kgwe.cluster.client import list_items

        custom = client.CustomObjectsApi(self.api)
        with self.reading("list GPUWorkloads", crd=f"{GPU_WORKLOAD_PLURAL}.{API_GROUP}"):
            if namespace is None:
                return list_items(
                    custom.list_cluster_custom_object,
                    group=API_GROUP,
                    version=CRD_VERSION,
                    plural=GPU_WORKLOAD_PLURAL,
                )
            return list_items(
                custom.list_namespaced_custom_object,
                group=API_GROUP,
                version=CRD_VERSION,
                namespace=namespace,
                plural=GPU_WORKLOAD_PLURAL,
            )

    def repositories(self) -> list[dict[str, Any]]:
        from kubernetes import client

        from kgwe.cluster.client import list_items

        custom = client.CustomObjectsApi(self.api)
        with self.reading("list PolicyRepositories", crd=f"{POLICY_REPOSITORY_PLURAL}.{API_GROUP}"):
            return list_items(
                custom.list_cluster_custom_object,
                group=API_GROUP,
                version=CRD_VERSION,
                plural=POLICY_REPOSITORY_PLURAL,
            )

    def components(self) -> list[dict[str, Any]]:
        from kubernetes import client

        from kgwe.cluster.client import list_items

        apps = client.AppsV1Api(self.api)
        with self.reading("list KGWE's Deployments and DaemonSets"):
            deployments = list_items(
                apps.list_deployment_for_all_namespaces, label_selector=COMPONENT_SELECTOR
            )
            daemonsets = list_items(
                apps.list_daemon_set_for_all_namespaces, label_selector=COMPONENT_SELECTOR
            )
        return [{**d, "kind": "Deployment"} for d in deployments] + [
            {**d, "kind": "DaemonSet"} for d in daemonsets
        ]

    def budget_events(self) -> list[dict[str, Any]]:
        from kubernetes import client

        from kgwe.cluster.client import list_items

        with self.reading("list events"):
            return list_items(
                client.CoreV1Api(self.api).list_event_for_all_namespaces,
                field_selector="involvedObject.kind=PolicyRepository",
            )

    def budget_quotas(self) -> list[dict[str, Any]]:
        from kubernetes import client

        from kgwe.cluster.client import list_items

        with self.reading("list ResourceQuotas"):
            return list_items(
                client.CoreV1Api(self.api).list_resource_quota_for_all_namespaces,
                field_selector=f"metadata.name={BUDGET_QUOTA_NAME}",
            )


def requests_by_node(
    pods_by_node: dict[str, list[dict[str, Any]]],
    gpu_requests: Callable[[Mapping[str, Any]], Mapping[str, int]],
) -> tuple[dict[str, dict[str, int]], dict[str, list[str]]]:
    requests: dict[str, dict[str, int]] = {}
    names: dict[str, list[str]] = {}
    for node, pods in pods_by_node.items():
        totals: dict[str, int] = defaultdict(int)
        for pod in pods:
            for resource, n in gpu_requests(pod).items():
                totals[resource] += n
        requests[node] = dict(totals)
        names[node] = sorted(f"{p['metadata'].get('namespace')}/{p['metadata'].get('name')}" for p in pods)
    return requests, names


def _api_message(exc: ApiException) -> str:
    import orjson

    try:
        return str(orjson.loads(exc.body).get("message"))[:500]
    except Exception:
        return str(exc.body)[:200]
